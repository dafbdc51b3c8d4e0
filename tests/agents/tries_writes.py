"""Test agent: try each write in the JSON list argv[1], print one JSON line of the outcomes.

Each item is [label, how, path, other]: `append` a line to path (creating it), `link` path
to other (a hard link at other), `symlink` other -> path and append through it, `mknod` a
block device at path, `remove` path, `locked_folder`: a folder with a file inside, left
mode 000 ($TMPDIR in a path is expanded). Outcome: "ok" or the errno's name; also its uid
and TMPDIR. Exit 0.
"""

import errno
import json
import os
import stat
import sys

LINE = b"written by a confined agent\n"


def attempt(how: str, path: str, other: str) -> str:
    try:
        if how == "append":
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            os.write(fd, LINE)
            os.close(fd)
        elif how == "link":
            os.link(path, other)
        elif how == "symlink":
            os.symlink(path, other)
            return attempt("append", other, "")
        elif how == "mknod":
            os.mknod(path, 0o600 | stat.S_IFBLK, os.makedev(7, 0))
        elif how == "remove":
            os.unlink(path)
        elif how == "locked_folder":
            os.makedirs(os.path.join(path, "inner"))
            with open(os.path.join(path, "inner", "file"), "w") as handle:
                handle.write("left behind\n")
            os.chmod(path, 0)
        else:
            raise ValueError(how)
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, str(exc.errno))
    return "ok"


if __name__ == "__main__":
    outcomes = {
        label: attempt(how, os.path.expandvars(path), other)
        for label, how, path, other in json.loads(sys.argv[1])
    }
    report = {"outcomes": outcomes, "tmpdir": os.environ.get("TMPDIR"), "uid": os.getuid()}
    print(json.dumps(report), flush=True)
