"""grpc_python_plugin adapts grpcio-tools' built-in grpc_python generator to
the protoc plugin protocol: it reads a CodeGeneratorRequest on stdin, runs the
embedded protoc over the request's descriptors and answers with the files."""

import os
import sys
import tempfile

from google.protobuf import descriptor_pb2
from google.protobuf.compiler import plugin_pb2
from grpc_tools import protoc


def main() -> int:
    request = plugin_pb2.CodeGeneratorRequest.FromString(sys.stdin.buffer.read())
    response = plugin_pb2.CodeGeneratorResponse()
    response.supported_features = plugin_pb2.CodeGeneratorResponse.FEATURE_PROTO3_OPTIONAL
    with tempfile.TemporaryDirectory() as tmp:
        fds = descriptor_pb2.FileDescriptorSet(file=request.proto_file)
        fds_path = os.path.join(tmp, "in.binpb")
        with open(fds_path, "wb") as f:
            f.write(fds.SerializeToString())
        out = os.path.join(tmp, "out")
        os.mkdir(out)
        opt = request.parameter
        args = ["protoc", f"--descriptor_set_in={fds_path}",
                f"--grpc_python_out={opt + ':' if opt else ''}{out}"]
        args += list(request.file_to_generate)
        if protoc.main(args) != 0:
            response.error = "grpc_python generation failed"
        else:
            for root, _, names in os.walk(out):
                for name in sorted(names):
                    path = os.path.join(root, name)
                    with open(path, encoding="utf-8") as f:
                        response.file.add(name=os.path.relpath(path, out), content=f.read())
    sys.stdout.buffer.write(response.SerializeToString())
    return 0


if __name__ == "__main__":
    sys.exit(main())
