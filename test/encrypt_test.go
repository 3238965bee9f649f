package test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/atoll-fs/atoll/internal/auth"
	"github.com/atoll-fs/atoll/internal/connect"
	"github.com/atoll-fs/atoll/internal/metawire"
)

// TestEncryptedCluster: a cluster whose roles run with ATOLL_ENCRYPT=1
// (`--encrypt`) serves clients that encrypt, data and metadata alike,
// and refuses one that does not with a message that says how to fix it.
func TestEncryptedCluster(t *testing.T) {
	t.Setenv(auth.EnvEncrypt, "1") // the roles startDev starts inherit it
	cl, _ := startDev(t, 3, 1, 0, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	plain := *testKey
	plain.Encrypt = false
	_, err := connect.Dial(ctx, []string{cl.Manager}, &plain, quietLogger())
	if err == nil || !strings.Contains(err.Error(), auth.EnvEncrypt) {
		t.Fatalf("a client that does not encrypt: %v, want refused naming %s", err, auth.EnvEncrypt)
	}

	enc := *testKey
	enc.Encrypt = true
	c, err := connect.Dial(ctx, []string{cl.Manager}, &enc, quietLogger())
	if err != nil {
		t.Fatalf("an encrypting client: %v", err)
	}
	defer c.Close()
	data := []byte(strings.Repeat("over encrypted connections\n", 40000)) // past inline, to the storage servers
	if err := c.FS.WriteFile(ctx, metawire.Root, "/enc", data, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := c.FS.ReadFile(ctx, metawire.Root, "/enc")
	if err != nil || string(got) != string(data) {
		t.Fatalf("read back: %d bytes, %v", len(got), err)
	}
}
