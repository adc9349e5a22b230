"""Decisions: what a user concludes from scored logs. Summaries per group (`summarize`), gates
(`gates`), compare two runs (`compare`), agreement with people (`agreement`, `judge_bench`),
calibration and human estimates from a few labels (`calibration`, `human` with the estimator
in `ppi` and the labels' reader in `labels`, `label_sheet`) and pairwise preferences
(`pairwise`), and a jury of runs scored apart (`jury_of_runs`). How much judges agree is
pure numbers: `ragframe.stats.alpha`.

Layer: above the engine; imports `engine`, `metrics`, `judge`, `inputs`, `stats`, the ground.
"""
