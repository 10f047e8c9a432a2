"""The checked-in PodResources modules match the .proto, and the .proto matches the kubelet's wire contract."""

from __future__ import annotations

from google.protobuf import descriptor_pb2

from watchdog.attribution.proto import generate
from watchdog.attribution.proto import podresources_v1_pb2 as pb

# (message, field, number, label-is-repeated) from kubernetes
# staging/src/k8s.io/kubelet/pkg/apis/podresources/v1/api.proto.
UPSTREAM_FIELDS = [
    ("ListPodResourcesResponse", "pod_resources", 1, True),
    ("AllocatableResourcesResponse", "devices", 1, True),
    ("AllocatableResourcesResponse", "cpu_ids", 2, True),
    ("AllocatableResourcesResponse", "memory", 3, True),
    ("GetPodResourcesRequest", "pod_name", 1, False),
    ("GetPodResourcesRequest", "pod_namespace", 2, False),
    ("GetPodResourcesResponse", "pod_resources", 1, False),
    ("PodResources", "name", 1, False),
    ("PodResources", "namespace", 2, False),
    ("PodResources", "containers", 3, True),
    ("ContainerResources", "name", 1, False),
    ("ContainerResources", "devices", 2, True),
    ("ContainerResources", "cpu_ids", 3, True),
    ("ContainerResources", "memory", 4, True),
    ("ContainerResources", "dynamic_resources", 5, True),
    ("ContainerDevices", "resource_name", 1, False),
    ("ContainerDevices", "device_ids", 2, True),
    ("ContainerDevices", "topology", 3, False),
    ("TopologyInfo", "nodes", 1, True),
    ("NUMANode", "ID", 1, False),
    ("ContainerMemory", "memory_type", 1, False),
    ("ContainerMemory", "size", 2, False),
    ("ContainerMemory", "topology", 3, False),
    ("DynamicResource", "claim_name", 2, False),
    ("DynamicResource", "claim_namespace", 3, False),
    ("DynamicResource", "claim_resources", 4, True),
    ("ClaimResource", "cdi_devices", 1, True),
    ("ClaimResource", "driver_name", 2, False),
    ("ClaimResource", "pool_name", 3, False),
    ("ClaimResource", "device_name", 4, False),
    ("CDIDevice", "name", 1, False),
]


def test_generated_modules_match_a_fresh_generation(tmp_path):
    written = generate.generate(tmp_path)
    assert [path.name for path in written] == list(generate.GENERATED)
    for path in written:
        checked_in = (generate.PROTO_DIR / path.name).read_bytes()
        assert path.read_bytes() == checked_in, f"{path.name} is stale: run python -m watchdog.attribution.proto.generate"


def test_grpc_module_imports_messages_relative_to_the_package():
    text = (generate.PROTO_DIR / "podresources_v1_pb2_grpc.py").read_text()
    assert "from . import podresources_v1_pb2 as podresources__v1__pb2" in text
    assert "\nimport podresources_v1_pb2" not in text


def test_field_numbers_and_cardinality_match_upstream():
    messages = pb.DESCRIPTOR.message_types_by_name
    for message, field, number, repeated in UPSTREAM_FIELDS:
        descriptor = messages[message].fields_by_name[field]
        assert descriptor.number == number, f"{message}.{field}"
        assert descriptor.is_repeated == repeated, f"{message}.{field} repeated"
    assert messages["ContainerMemory"].fields_by_name["size"].type == descriptor_pb2.FieldDescriptorProto.TYPE_UINT64
    assert messages["NUMANode"].fields_by_name["ID"].type == descriptor_pb2.FieldDescriptorProto.TYPE_INT64


def test_dynamic_resource_reserves_the_removed_field_one():
    file_proto = descriptor_pb2.FileDescriptorProto()
    pb.DESCRIPTOR.CopyToProto(file_proto)
    dynamic = next(message for message in file_proto.message_type if message.name == "DynamicResource")
    assert [(r.start, r.end) for r in dynamic.reserved_range] == [(1, 2)]
    assert min(field.number for field in dynamic.field) == 2  # field 1 was removed upstream


def test_service_paths_are_the_kubelets():
    assert pb.DESCRIPTOR.package == "v1"
    service = pb.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert service.full_name == "v1.PodResourcesLister"
    methods = {method.name: (method.input_type.name, method.output_type.name) for method in service.methods}
    assert methods == {
        "List": ("ListPodResourcesRequest", "ListPodResourcesResponse"),
        "GetAllocatableResources": ("AllocatableResourcesRequest", "AllocatableResourcesResponse"),
        "Get": ("GetPodResourcesRequest", "GetPodResourcesResponse"),
    }


def test_wire_bytes_decode_with_upstream_numbers():
    # A ContainerDevices hand-encoded from the field numbers alone: 1=resource_name, 2=device_ids (both strings).
    wire = b"\x0a\x0envidia.com/gpu" + b"\x12\x05GPU-1" + b"\x12\x08GPU-2::3"
    devices = pb.ContainerDevices.FromString(wire)
    assert devices.resource_name == "nvidia.com/gpu"
    assert list(devices.device_ids) == ["GPU-1", "GPU-2::3"]
