package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSocketInASharedDirectory: in a 1777 directory any user can bind the
// socket first, or replace it; the agent refuses to serve there, and says
// how to fix it, rather than give the root hooks a socket they cannot
// trust.
func TestSocketInASharedDirectory(t *testing.T) {
	dir, err := os.MkdirTemp("", "llmgw-run")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o777|os.ModeSticky)
	l, err := listenSocket(filepath.Join(dir, "agent.sock"))
	if err == nil {
		l.Close()
		t.Fatal("the agent bound its socket in a 1777 directory")
	}
	if !strings.Contains(err.Error(), "chmod 755 "+dir) {
		t.Errorf("refusal = %v; want it to say 'chmod 755 %s'", err, dir)
	}
	os.Chmod(dir, 0o755)
	l, err = listenSocket(filepath.Join(dir, "agent.sock"))
	if err != nil {
		t.Fatalf("a 0755 directory: %v", err)
	}
	l.Close()
}
