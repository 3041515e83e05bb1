"""EmberVulkanBackend, the exporter half: partitioner (:mod:`.partition`) and blob writer
(:mod:`.blob`) of the Vulkan compute delegate (backends/vulkan/README.md)."""
