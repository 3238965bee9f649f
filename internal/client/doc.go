// Package client is the client library's logical and physical layers (the
// naming and cache layers arrive with the namespace).
//
// # Writing
//
// Each client owns one append-only Log per policy class; its id is derived
// from the client id and the policy text. Append copies file data into the
// open stripe as blocks (at most the policy's block size; blocks of many
// files share a stripe) and returns a layout.Pointer per block at once:
// placement is chosen when a stripe opens and the shard size is the policy's
// fragment size, so a block's stripe, offset and slots are known before the
// stripe is sealed. A full stripe, or the open stripe at Flush, is handed
// to a writer goroutine which computes parity and puts all K+M fragments in
// parallel; up to Config.Pipeline stripes are in flight while the next one
// fills. Fragments are never rewritten, so a short stripe is just a stripe
// with less data: there is no write hole. Pointers are durable once Flush
// returns nil.
//
// Invariant: Flush returns nil only when every stripe appended before it
// has at least K fragments durable (K data for EC, one copy for mirrors).
// Fragments that could not be written (server down or failing) make the
// stripe degraded: it is listed by DegradedStripes and counted in Stats.
//
// # Reading
//
// Read fetches the byte ranges a pointer covers straight from the servers
// holding its data fragments, in parallel, and verifies the block's CRC32C
// (the parental checksum). A fragment that is missing, times out
// (Config.ReadTimeout), is reported corrupt by its server, or yields bytes
// failing the checksum is rebuilt from the same range of the other
// fragments (a degraded read). A fragment a live server reports corrupt or
// lost is rebuilt whole and written back to the same slot in the
// background (identical bytes, so immutability holds); the server itself
// checks that a repair matches its recorded checksums.
//
// Invariant: Read returns nil only with bytes whose CRC32C equals the
// pointer's; otherwise ErrUnrecoverable (EIO at the edges).
//
// A File keeps an 8 MiB read-ahead window for a sequential reader and,
// while the reader consumes it, fetches the next window in a background
// goroutine (owned by the FS: Close waits for it). Any write, commit or
// truncation drops both; a prefetch that finishes after that is discarded.
//
// # Lazy creates
//
// With FS.SetLazyCreate (the FUSE mount) a non-exclusive regular-file
// create asks its island not to wait for the log sync (CreateReq.Lazy).
// The FS remembers such files until something made them durable: a commit
// to the file (always synced), or, when Flush, Fsync or Close has nothing
// to commit, an OpSync to its island. So a lazily created file is durable
// when close or fsync returns, as every other change is; before that an
// island crash may lose it (the island's syncer usually makes it durable
// within one log sync anyway), and its inode number is never reused. The
// NFS gateway never creates lazily: NFS CREATE must be stable when
// answered.
package client
