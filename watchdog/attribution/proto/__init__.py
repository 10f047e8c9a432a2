"""The kubelet PodResources v1 protocol: the .proto, its generated modules and the generator."""
