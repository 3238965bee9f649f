"""Take an exclusive SMB2 byte-range lock and hold it (test helper).

usage: smblock.py HOST PORT SHARE USER PASSWORD FILE OFFSET LENGTH

Prints "granted" and holds the lock until standard input closes, then
unlocks and exits 0; prints "conflict STATUS" and exits 1 if the server
refuses it at once (FAIL_IMMEDIATELY).
"""
import sys
import uuid

from smbprotocol.connection import Connection
from smbprotocol.exceptions import SMBResponseException
from smbprotocol.open import (CreateDisposition, CreateOptions, FilePipePrinterAccessMask,
                              ImpersonationLevel, LockFlags, Open, ShareAccess, SMB2LockElement)
from smbprotocol.session import Session
from smbprotocol.tree import TreeConnect


def main():
    host, port, share, user, password, name, off, length = sys.argv[1:9]
    conn = Connection(uuid.uuid4(), host, int(port))
    conn.connect()
    sess = Session(conn, user, password, require_encryption=False)
    sess.connect()
    tree = TreeConnect(sess, r"\\%s\%s" % (host, share))
    tree.connect()
    f = Open(tree, name)
    f.create(ImpersonationLevel.Impersonation,
             FilePipePrinterAccessMask.GENERIC_READ | FilePipePrinterAccessMask.GENERIC_WRITE,
             0x80,  # FILE_ATTRIBUTE_NORMAL
             ShareAccess.FILE_SHARE_READ | ShareAccess.FILE_SHARE_WRITE | ShareAccess.FILE_SHARE_DELETE,
             CreateDisposition.FILE_OPEN_IF, CreateOptions.FILE_NON_DIRECTORY_FILE)
    el = SMB2LockElement()
    el["offset"] = int(off)
    el["length"] = int(length)
    el["flags"] = LockFlags.SMB2_LOCKFLAG_EXCLUSIVE_LOCK | LockFlags.SMB2_LOCKFLAG_FAIL_IMMEDIATELY
    try:
        f.lock([el])
    except SMBResponseException as e:
        print("conflict %s" % e.status, flush=True)
        f.close()
        return 1
    print("granted", flush=True)
    sys.stdin.read()
    un = SMB2LockElement()
    un["offset"] = int(off)
    un["length"] = int(length)
    un["flags"] = LockFlags.SMB2_LOCKFLAG_UNLOCK
    f.lock([un])
    f.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
