package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"testing"
	"time"
)

// The figures behind the choice of an HMAC handshake over TLS for the
// data path (doc.go): one stream of 1 MiB writes over loopback, plain
// (what the wire protocol sends after the handshake) against TLS 1.3
// with AES-128-GCM, the cipher Go picks on this hardware. Run with
//
//	go test -run NONE -bench Transport -benchtime 2s ./internal/auth
func BenchmarkTransportPlain(b *testing.B)  { benchTransport(b, "plain") }
func BenchmarkTransportTLS(b *testing.B)    { benchTransport(b, "tls") }
func BenchmarkTransportSealed(b *testing.B) { benchTransport(b, "sealed") }
func BenchmarkTransportEncrypted(b *testing.B) {
	benchTransport(b, "encrypted")
}

func benchTransport(b *testing.B, mode string) {
	useTLS := mode == "tls"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	var srvCfg, cliCfg *tls.Config
	if useTLS {
		srvCfg, cliCfg = tlsConfigs(b)
	}
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		switch mode {
		case "tls":
			c = tls.Server(c, srvCfg)
		case "sealed", "encrypted":
			c, _ = newSealed(c, make([]byte, 16), make([]byte, 16), mode == "encrypted")
		}
		_, _ = io.Copy(io.Discard, c)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if useTLS {
		tc := tls.Client(c, cliCfg)
		if err := tc.Handshake(); err != nil {
			b.Fatal(err)
		}
		c = tc
	}
	if mode == "sealed" || mode == "encrypted" {
		c, _ = newSealed(c, make([]byte, 16), make([]byte, 16), mode == "encrypted")
	}
	buf := make([]byte, 1<<20)
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
}

func tlsConfigs(b *testing.B) (*tls.Config, *tls.Config) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "atoll"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		b.Fatal(err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	pool := x509.NewCertPool()
	parsed, _ := x509.ParseCertificate(der)
	pool.AddCert(parsed)
	srv := &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool, MinVersion: tls.VersionTLS13}
	cli := &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13}
	return srv, cli
}

// BenchmarkHandshake is the HMAC handshake's cost per connection.
func BenchmarkHandshake(b *testing.B) {
	ck, _ := NewClusterKey()
	v, _ := NewVerifier(ck)
	mount, _ := ck.Derive("m", CapRead|CapWrite)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _, _ = v.Server(c, time.Second); c.Close() }()
		}
	}()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Client(c, mount, time.Second); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}
