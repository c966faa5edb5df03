"""Vocabulary: plain data for resources, devices, nodes and topology. No I/O."""
