"""moto's S3 server on 127.0.0.1, the stand-in for a bucket in the tests of remote paths: one
bucket, a boto3 client to put objects, and the storage options (or environment) that reach it.
No network: the server runs in this process's thread and stops when the block ends."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

#: moto's fixed test credentials and region.
KEYS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
REGION = "us-east-1"


@dataclass
class Bucket:
    """A bucket on the stand-in: where it is, a client, and how Polars reaches it."""

    name: str
    endpoint: str
    client: Any

    @property
    def options(self) -> dict[str, str]:
        """Polars' storage options for the stand-in (plain HTTP on 127.0.0.1)."""
        return {
            "aws_endpoint_url": self.endpoint,
            **KEYS,
            "aws_region": REGION,
            "aws_allow_http": "true",
        }

    @property
    def env(self) -> dict[str, str]:
        """The same as the environment variables the command line reads."""
        return {key.upper(): value for key, value in self.options.items()}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def s3_bucket(name: str) -> Iterator[Bucket]:
    """Start moto's server on a free port of 127.0.0.1 with the bucket `name`; stop it after."""
    import boto3
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{port}"
        client = boto3.client("s3", endpoint_url=endpoint, region_name=REGION, **KEYS)
        client.create_bucket(Bucket=name)
        yield Bucket(name, endpoint, client)
    finally:
        server.stop()
