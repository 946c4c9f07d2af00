"""Workload and trace readers, synthetic generators and throughput tables."""
