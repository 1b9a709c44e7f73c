package munge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
)

// Programs talks to munged through the munge and unmunge programs: no cgo,
// but a process started per call.
type Programs struct {
	Path string
	// Munge and Unmunge are the programs (default "munge", "unmunge"
	// from $PATH).
	Munge, Unmunge string
}

func (p *Programs) Socket() string { return p.Path }

func (p *Programs) prog(name, set string) string {
	if set != "" {
		return set
	}
	return name
}

// Encode runs munge with payload on its stdin.
func (p *Programs) Encode(ctx context.Context, payload []byte) (string, error) {
	cmd := exec.CommandContext(ctx, p.prog("munge", p.Munge), "--socket="+p.Path)
	cmd.Stdin = bytes.NewReader(payload)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", progErr("encode", err, stderr.String(), p.Path)
	}
	return strings.TrimSpace(string(out)), nil
}

// Decode runs unmunge and parses its numeric metadata: the lines up to the
// first empty one; the payload follows.
func (p *Programs) Decode(ctx context.Context, cred string) (Cred, error) {
	cmd := exec.CommandContext(ctx, p.prog("unmunge", p.Unmunge), "--socket="+p.Path, "--numeric",
		"--keys=STATUS,ENCODE_HOST,UID,GID")
	cmd.Stdin = strings.NewReader(cred)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return Cred{}, progErr("decode", err, stderr.String(), p.Path)
	}
	return parseUnmunge(out)
}

// parseUnmunge reads `unmunge --numeric` output.
func parseUnmunge(out []byte) (Cred, error) {
	meta, payload, ok := bytes.Cut(out, []byte("\n\n"))
	if !ok {
		return Cred{}, &Error{Op: "decode", Status: -1, Msg: fmt.Sprintf("unmunge printed no metadata: %.80q", out)}
	}
	var c Cred
	var have int
	for _, line := range strings.Split(string(meta), "\n") {
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimSpace(v)
		var err error
		switch k {
		case "STATUS":
			if v != "0" {
				err = fmt.Errorf("status %s", v)
			}
		case "ENCODE_HOST":
			c.Addr, err = netip.ParseAddr(v)
		case "UID":
			c.UID, err = parseID(v)
		case "GID":
			c.GID, err = parseID(v)
		default:
			continue
		}
		if err != nil {
			return Cred{}, &Error{Op: "decode", Status: -1, Msg: fmt.Sprintf("unmunge's %s line %q: %v", k, line, err)}
		}
		have++
	}
	if have != 4 {
		return Cred{}, &Error{Op: "decode", Status: -1, Msg: fmt.Sprintf("unmunge printed %d of STATUS, ENCODE_HOST, UID and GID", have)}
	}
	if len(payload) > 0 {
		c.Payload = payload
	}
	return c, nil
}

func parseID(v string) (uint32, error) {
	n, err := strconv.ParseUint(v, 10, 32)
	return uint32(n), err
}

// progErr turns a failed run into an *Error: munge and unmunge exit with
// munged's status.
func progErr(op string, err error, stderr, socket string) error {
	msg := strings.TrimSpace(stderr)
	if msg == "" {
		msg = err.Error()
	}
	msg += " (socket " + socket + ")"
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() > 0 {
		return &Error{Op: op, Status: ee.ExitCode(), Msg: msg}
	}
	return &Error{Op: op, Status: -1, Msg: msg}
}
