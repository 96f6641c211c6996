#!/usr/bin/env python3
"""Extract one novel from Debian's r-cran-janeaustenr (resources/texts/README.md says why).

  apt-get download r-cran-janeaustenr && dpkg-deb -x r-cran-janeaustenr_*.deb x
  scripts/extract_janeausten.py x/usr/lib/R/site-library/janeaustenr/data/Rdata.rdb \
      "PRIDE AND PREJUDICE" > resources/texts/pride-and-prejudice.txt

An R lazy-load database is a sequence of objects, each a 4-byte length followed by a zlib
stream of R's XDR serialization. A character vector's elements are CHARSXP records: 4 bytes of
flags (low byte 9), a 4-byte big-endian length (-1 for NA), the bytes. No R needed.
"""
import struct
import sys
import zlib


def objects(rdb):
    off = 0
    while off + 4 < len(rdb):
        d = zlib.decompressobj()
        data = d.decompress(rdb[off + 4:])
        yield data
        off = len(rdb) - len(d.unused_data)


def strings(data):
    out, i = [], 0
    while i + 8 <= len(data):
        flags = struct.unpack(">I", data[i:i + 4])[0]
        if flags & 0xFF == 9:
            n = struct.unpack(">i", data[i + 4:i + 8])[0]
            if n == -1:
                out.append("")
                i += 8
                continue
            if 0 <= n <= len(data) - i - 8:
                out.append(data[i + 8:i + 8 + n].decode("utf-8"))
                i += 8 + n
                continue
        i += 1
    return out


def main():
    rdb = open(sys.argv[1], "rb").read()
    for data in objects(rdb):
        lines = strings(data)
        if lines and lines[0] == sys.argv[2]:
            sys.stdout.write("\n".join(lines) + "\n")
            return 0
    sys.stderr.write("no novel starting with %r\n" % sys.argv[2])
    return 1


if __name__ == "__main__":
    sys.exit(main())
