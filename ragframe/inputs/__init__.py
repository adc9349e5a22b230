"""inputs: reading logs into ragframe's frame — files, traces, canonical columns; imports nothing
above errors."""
