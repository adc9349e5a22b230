"""Inputs: reading logs into ragframe's frame. Files (Parquet, JSON Lines, CSV) chunk by chunk
(`io`), the canonical columns and their aliases (`columns`), uniform samples drawn while
streaming (`sample`), and traces from the tools RAG teams run (`traces`).

Layer: above `stats` and the ground (`errors`); imports nothing above it.
"""
