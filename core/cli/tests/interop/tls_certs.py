"""Test certificates for keel's TLS tests, made with trustme (PyPI, in the virtualenv
scripts/test makes) into the directory given as the only argument.

Writes, each as PEM:
  ca.pem                     the test CA the clients trust
  server.pem, server.key     a chain (leaf first) and key for "localhost" and 127.0.0.1
  other.pem, other.key       the same names, signed by another CA (unknown issuer)
  wrongname.pem, wrongname.key  signed by the test CA, for "venue.invalid" only
  expired.pem, expired.key   signed by the test CA, for the right names, expired a year ago

Prints `ok DIR` when done.
"""

import datetime
import os
import sys

import trustme


def write(leaf, directory, name):
    leaf.private_key_pem.write_to_path(os.path.join(directory, name + ".key"))
    with open(os.path.join(directory, name + ".pem"), "wb") as f:
        for blob in leaf.cert_chain_pems:
            f.write(blob.bytes())


def main():
    directory = sys.argv[1]
    ca = trustme.CA()
    ca.cert_pem.write_to_path(os.path.join(directory, "ca.pem"))
    write(ca.issue_cert("localhost", "127.0.0.1"), directory, "server")
    write(trustme.CA().issue_cert("localhost", "127.0.0.1"), directory, "other")
    write(ca.issue_cert("venue.invalid"), directory, "wrongname")
    now = datetime.datetime.now(datetime.timezone.utc)
    expired = ca.issue_cert(
        "localhost",
        "127.0.0.1",
        not_before=now - datetime.timedelta(days=730),
        not_after=now - datetime.timedelta(days=365),
    )
    write(expired, directory, "expired")
    print("ok", directory, flush=True)


main()
