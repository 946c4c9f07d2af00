"""Server reflection under both protocol names: grpc.reflection.v1 and v1alpha.

grpcio-reflection serves only v1alpha; newer clients (grpcurl, Postman, grpc-java's tools) ask
for v1 first. The two protocols have the same messages with the same field numbers, only the
package differs, so v1 is served by the same servicer under the v1 method path with the v1alpha
(de)serializers: the bytes on the wire are the same. So that a client can also *describe* the v1
service, a copy of the v1alpha file descriptor renamed to the v1 package is added to the
descriptor pool.
"""

from __future__ import annotations

from collections.abc import Iterable

import grpc
import grpc.aio
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection
from grpc_reflection.v1alpha import reflection_pb2 as alpha_pb

V1_PACKAGE = "grpc.reflection.v1"
V1_SERVICE_NAME = f"{V1_PACKAGE}.ServerReflection"
V1_FILE_NAME = "grpc/reflection/v1/reflection.proto"
_ALPHA_PACKAGE = alpha_pb.DESCRIPTOR.package


def v1_file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    """The v1alpha reflection file renamed to the v1 package (same messages and numbers)."""
    alpha = descriptor_pb2.FileDescriptorProto()
    alpha_pb.DESCRIPTOR.CopyToProto(alpha)
    v1 = descriptor_pb2.FileDescriptorProto()
    v1.CopyFrom(alpha)
    v1.name = V1_FILE_NAME
    v1.package = V1_PACKAGE
    v1.ClearField("options")  # language options name the v1alpha package
    old, new = f".{_ALPHA_PACKAGE}.", f".{V1_PACKAGE}."
    for message in v1.message_type:
        for field in message.field:
            if field.type_name.startswith(old):
                field.type_name = new + field.type_name[len(old):]
    for service in v1.service:
        for method in service.method:
            method.input_type = new + method.input_type[len(old):]
            method.output_type = new + method.output_type[len(old):]
    return v1


def _add_v1_descriptor(pool: descriptor_pool.DescriptorPool) -> None:
    try:
        pool.FindFileByName(V1_FILE_NAME)
    except KeyError:
        pool.AddSerializedFile(v1_file_descriptor().SerializeToString())


def enable_reflection(service_names: Iterable[str], server: grpc.aio.Server) -> None:
    """Serve reflection for `service_names` (plus both reflection services) on `server`."""
    _add_v1_descriptor(descriptor_pool.Default())
    names = (*service_names, reflection.SERVICE_NAME, V1_SERVICE_NAME)
    reflection.enable_server_reflection(names, server)
    servicer = reflection.aio.ReflectionServicer(names)
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                V1_SERVICE_NAME,
                {
                    "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
                        servicer.ServerReflectionInfo,
                        request_deserializer=alpha_pb.ServerReflectionRequest.FromString,
                        response_serializer=alpha_pb.ServerReflectionResponse.SerializeToString,
                    )
                },
            ),
        )
    )
