"""NVML answered from a simulated node: ``SimulatedNvml`` is the module object a sampler receives instead of
``pynvml``, held to nvidia-ml-py's functions, structs and errors."""
