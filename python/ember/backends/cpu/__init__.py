"""EmberCpuBackend: partitioner and blob writer (the runtime half is backends/cpu/)."""
