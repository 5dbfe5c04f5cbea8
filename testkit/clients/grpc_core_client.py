"""A gRPC core client (Python grpcio) for tests/grpc_uds_clients.rs: asks a server's health and
makes one RLS call, and prints what came back as one JSON line.

    grpc_core_client.py TARGET REQUEST_HEX [AUTHORITY]

TARGET is a gRPC target such as unix:/run/ratelimitd.sock; REQUEST_HEX an encoded
RateLimitRequest (the test encodes it with the crate's own protos, so no Python stubs are
needed); AUTHORITY, when given, replaces the :authority gRPC core would send for TARGET.
Output: {"health": "SERVING", "response": "<hex of the RateLimitResponse>"}, or
{"error": "<status code>", "details": "..."} and exit status 1.
"""

import json
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

SHOULD_RATE_LIMIT = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"


def main():
    target, request_hex = sys.argv[1], sys.argv[2]
    options = [("grpc.default_authority", sys.argv[3])] if len(sys.argv) > 3 else []
    with grpc.insecure_channel(target, options=options) as channel:
        try:
            health = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=10
            )
            call = channel.unary_unary(SHOULD_RATE_LIMIT)
            response = call(bytes.fromhex(request_hex), timeout=10)
        except grpc.RpcError as error:
            print(json.dumps({"error": error.code().name, "details": error.details()}))
            return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(health.status)
    print(json.dumps({"health": status, "response": response.hex()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
