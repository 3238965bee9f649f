package nfs

import (
	"fmt"
	"net"
)

// A minimal portmapper (RFC 1833): enough for clients that ask where
// MOUNT and NFS listen (libnfs without ?nfsport=&mountport=, go-nfs-client).
// Only TCP is served, so UDP queries get port 0.
const (
	pmapProcNull    = 0
	pmapProcSet     = 1
	pmapProcUnset   = 2
	pmapProcGetPort = 3
	pmapProcDump    = 4

	rpcbProcGetAddr = 3

	ipprotoTCP = 6
)

var pmapV2Procs = [...]procFunc{
	pmapProcNull:    procNull,
	pmapProcSet:     pmapRefuse,
	pmapProcUnset:   pmapRefuse,
	pmapProcGetPort: pmapGetPort,
	pmapProcDump:    pmapDump,
}

var rpcbProcs = [...]procFunc{
	pmapProcNull:    procNull,
	rpcbProcGetAddr: rpcbGetAddr,
}

func pmapProcs(vers uint32) []procFunc {
	if vers == 2 {
		return pmapV2Procs[:]
	}
	return rpcbProcs[:]
}

// served reports whether the gateway serves prog/vers over TCP.
func served(prog, vers uint32) bool {
	switch prog {
	case progNFS, progMount:
		return vers == 3
	case progNLM:
		return vers == 4
	case progNSM:
		return vers == 1
	case progPortmap:
		return vers >= 2 && vers <= 4
	}
	return false
}

func (c *call) portFor(prog uint32) uint32 {
	if prog == progPortmap && c.s.pmln != nil {
		return uint32(c.s.pmln.Addr().(*net.TCPAddr).Port)
	}
	return c.s.port()
}

// SET and UNSET: registrations are not accepted.
func pmapRefuse(c *call) error {
	c.args.Uint32()
	c.args.Uint32()
	c.args.Uint32()
	c.args.Uint32()
	if c.args.Finish() != nil {
		return errGarbage
	}
	c.res.Bool(false)
	return nil
}

func pmapGetPort(c *call) error {
	prog, vers, prot := c.args.Uint32(), c.args.Uint32(), c.args.Uint32()
	c.args.Uint32() // port: ignored
	if c.args.Finish() != nil {
		return errGarbage
	}
	if prot != ipprotoTCP || !served(prog, vers) {
		c.res.Uint32(0)
		return nil
	}
	c.res.Uint32(c.portFor(prog))
	return nil
}

func pmapDump(c *call) error {
	if c.args.Finish() != nil {
		return errGarbage
	}
	for _, m := range [][2]uint32{{progPortmap, 2}, {progMount, 3}, {progNFS, 3}, {progNLM, 4}, {progNSM, 1}} {
		c.res.Bool(true)
		c.res.Uint32(m[0])
		c.res.Uint32(m[1])
		c.res.Uint32(ipprotoTCP)
		c.res.Uint32(c.portFor(m[0]))
	}
	c.res.Bool(false)
	return nil
}

// rpcbind v3/v4 GETADDR: the universal address "h1.h2.h3.h4.p1.p2" of
// prog/vers over "tcp" (or "tcp6"), "" when not served.
func rpcbGetAddr(c *call) error {
	prog, vers := c.args.Uint32(), c.args.Uint32()
	netid := c.args.String(64)
	c.args.String(256) // r_addr
	c.args.String(256) // r_owner
	if c.args.Finish() != nil {
		return errGarbage
	}
	if (netid != "tcp" && netid != "tcp6") || !served(prog, vers) {
		c.res.String("")
		return nil
	}
	p := c.portFor(prog)
	host := c.conn.local
	if !host.IsValid() {
		c.res.String("")
		return nil
	}
	c.res.String(fmt.Sprintf("%s.%d.%d", host, p>>8, p&0xff))
	return nil
}
