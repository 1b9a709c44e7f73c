package api

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadTokenRefusesOpenFiles(t *testing.T) {
	dir := t.TempDir()
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o660, 0o666} {
		p := filepath.Join(dir, "agent.token")
		if err := os.WriteFile(p, []byte("secret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		_, err := ReadToken(p)
		if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "chmod 600 "+p) {
			t.Errorf("ReadToken of a %04o file = %v; want a refusal naming the file and 'chmod 600 %s'", mode, err, p)
		}
	}
	p := filepath.Join(dir, "ok.token")
	os.WriteFile(p, []byte("secret\n"), 0o600)
	if tok, err := ReadToken(p); err != nil || tok != "secret" {
		t.Errorf("ReadToken of a 0600 file = %q, %v", tok, err)
	}
	os.Chmod(p, 0o400)
	if _, err := ReadToken(p); err != nil {
		t.Errorf("ReadToken of a 0400 file = %v", err)
	}
}

// TestReadTokenRefusesForeignOwner: the agent and coordinator read their
// tokens as root. A 0600 token owned by an ordinary user is that user's to
// read and to replace: refused, naming the file, its owner and the chown.
func TestReadTokenRefusesForeignOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving a file to another user needs root")
	}
	p := filepath.Join(t.TempDir(), "agent.token")
	if err := os.WriteFile(p, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	_, err := ReadToken(p)
	if err == nil || !strings.Contains(err.Error(), p+" is owned by uid 65534") || !strings.Contains(err.Error(), "chown root:root "+p) {
		t.Errorf("ReadToken of a 0600 file owned by uid 65534 = %v; want a refusal naming the file, its owner and 'chown root:root %s'", err, p)
	}
	if err := os.Chown(p, 0, 0); err != nil {
		t.Fatal(err)
	}
	if tok, err := ReadToken(p); err != nil || tok != "secret" {
		t.Errorf("ReadToken of a root-owned 0600 file = %q, %v", tok, err)
	}
}
