package smb

import (
	"encoding/hex"
	"strings"
	"testing"
)

// RFC 1320's test suite, and the NT hash of "password" every NTLM tool
// agrees on.
func TestMD4AndNTHash(t *testing.T) {
	for in, want := range map[string]string{
		"":                              "31d6cfe0d16ae931b73c59d7e0c089c0",
		"a":                             "bde52cb31de33e46245e05fbdbd6fb24",
		"abc":                           "a448017aaf21d8525fc10ae87aa6729d",
		"message digest":                "d9130a8164549fe818874806e1c7014b",
		"abcdefghijklmnopqrstuvwxyz":    "d79e1c308aa5bbcdeea8ed63df412da9",
		strings.Repeat("1234567890", 8): "e33b4ddc9c38f2199c3e7b164fcc0536",
	} {
		got := md4([]byte(in))
		if hex.EncodeToString(got[:]) != want {
			t.Errorf("md4(%q) = %x, want %s", in, got, want)
		}
	}
	if h := NTHash("password"); hex.EncodeToString(h[:]) != "8846f7eaee8fb117ad06bdd830b7586c" {
		t.Errorf("NTHash(password) = %x", h)
	}
}
