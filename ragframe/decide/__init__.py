"""decisions: what a user concludes from scores — summaries, gates, compare, agreement, human
estimates; may import inputs, judge, metrics, never the engine, report, ray or cli."""
