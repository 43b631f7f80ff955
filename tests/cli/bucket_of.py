#!/usr/bin/env python3
"""tests/cli/bucket_of.py: a user's bucket, as common/sale/bucket.c's bucket_of
computes it (splitmix64's finaliser, modulo K), for the shell tests that must
put a buyer in a chosen bucket (issue #57).

  bucket_of.py K USER          the bucket of USER in an item of K buckets
  bucket_of.py K --first FROM  the first user from FROM on in each bucket, in bucket order
"""
import sys

M = (1 << 64) - 1


def bucket(user, k):
    x = user & M
    x ^= x >> 30
    x = (x * 0xbf58476d1ce4e5b9) & M
    x ^= x >> 27
    x = (x * 0x94d049bb133111eb) & M
    x ^= x >> 31
    return x % k


def main(argv):
    if len(argv) == 3 and argv[1].isdigit() and argv[2].lstrip("-").isdigit():
        print(bucket(int(argv[2]), int(argv[1])))
        return 0
    if len(argv) == 4 and argv[1].isdigit() and argv[2] == "--first" and argv[3].isdigit():
        k, u, found = int(argv[1]), int(argv[3]), {}
        while len(found) < k:
            found.setdefault(bucket(u, k), u)
            u += 1
        print(" ".join(str(found[b]) for b in range(k)))
        return 0
    print(__doc__.strip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
