"""Decisions: what a user concludes from scored logs. Summaries per group (`summarize`), gates
(`gates`), compare two runs (`compare`), agreement with people (`agreement`, `judge_bench`),
calibration and human estimates from a few labels (`calibration`, `human`, `label_sheet`),
pairwise preferences (`pairwise`) and how much judges agree (`alpha`).

Layer: above the engine; imports `engine`, `metrics`, `judge`, `inputs`, `stats`, the ground.
"""
