package nodeconf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/llmgw/llmgw/internal/jsonlite"
	"github.com/llmgw/llmgw/weights/catalog"
)

// Path finds --config in args, else LLMGW_CONFIG, else def. explicit is
// false only for the built-in default, whose absence is not an error: a node
// configured entirely by flags has no file.
func Path(args []string, getenv func(string) string, def string) (path string, explicit bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			return v, true
		}
		if a == "--config" && i+1 < len(args) {
			return args[i+1], true
		}
	}
	if v := getenv("LLMGW_CONFIG"); v != "" {
		return v, true
	}
	return def, false
}

// resolvedFormat changes when the meaning of a resolved copy does; a copy
// of another format is not used.
const resolvedFormat = 1

// resolved is a configuration file's settings as llmgw loaded them, with
// the identity of the file they came from.
type resolved struct {
	Format int    `json:"format"`
	Build  string `json:"build"`
	File   string `json:"file"`
	FileID
	Config Agent `json:"config"`
}

// FileID is what changes when a file is edited, replaced or touched.
type FileID struct {
	Size    int64  `json:"size"`
	MtimeNS int64  `json:"mtime_ns"`
	CtimeNS int64  `json:"ctime_ns"`
	Ino     uint64 `json:"ino"`
	Dev     uint64 `json:"dev"`
	UID     uint32 `json:"uid"`
}

func idOf(st os.FileInfo) (FileID, bool) {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return FileID{}, false
	}
	return FileID{Size: st.Size(), MtimeNS: st.ModTime().UnixNano(), CtimeNS: sys.Ctim.Nano(), Ino: sys.Ino, Dev: uint64(sys.Dev), UID: sys.Uid}, true
}

// StatFile returns the identity of the configuration file path, for
// WriteResolved: take it before loading the file, so that an edit during
// the load makes the copy invalid rather than wrong.
func StatFile(path string) (FileID, error) {
	st, err := os.Stat(path)
	if err != nil {
		return FileID{}, err
	}
	id, ok := idOf(st)
	if !ok {
		return FileID{}, errors.New("no file identity on this system")
	}
	return id, nil
}

// ResolvedPath is where the resolved copy of the configuration file path
// is kept: beside it, hidden, so that whoever may change the file (and so
// the node's behaviour) is whoever may change the copy. For the packaged
// /etc/llmgw/agent.toml that puts a file dpkg does not know in /etc/llmgw:
// the package's postremove deletes it on purge (cmd/llmgw's
// TestPackagedPaths keeps the two in step). Where /etc is read-only the
// copy is never written and every job takes the hooks' slow path.
func ResolvedPath(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".resolved.json")
}

// WriteResolved records cfg as what the configuration file path gives,
// when loaded by build with no flags and no LLMGW_* settings; id is
// StatFile(path) taken before the load. If the file changed since, nothing
// is written. The copy is readable by all: the TaskProlog runs as the job's
// user, and the settings are paths, not secrets.
func WriteResolved(path string, before FileID, build string, cfg Agent) error {
	now, err := StatFile(path)
	if err != nil {
		return err
	}
	if now != before {
		return fmt.Errorf("resolved copy: %s changed while it was read", path)
	}
	b, err := json.Marshal(resolved{Format: resolvedFormat, Build: build, File: path, FileID: before, Config: cfg})
	if err != nil {
		return err
	}
	return catalog.WriteAtomic(ResolvedPath(path), append(b, '\n'), 0o644)
}

// ErrNoResolved is wrapped by ReadResolved when there is no usable
// resolved copy: none was written, the file changed since, or another
// build of llmgw wrote it. The caller then loads the file itself, or hands
// the job to llmgw, which does and writes a new copy.
var ErrNoResolved = errors.New("no resolved copy of the configuration")

// ReadResolved returns what the configuration file path gives, from the
// copy WriteResolved left, if it is for this file as it is now, was written
// by build, and belongs to the file's owner.
func ReadResolved(path, build string) (Agent, error) {
	st, err := os.Stat(path)
	if err != nil {
		return Agent{}, err
	}
	id, ok := idOf(st)
	if !ok {
		return Agent{}, ErrNoResolved
	}
	f, err := catalog.OpenRegular(ResolvedPath(path))
	if err != nil {
		return Agent{}, fmt.Errorf("%w: %v", ErrNoResolved, err)
	}
	defer f.Close()
	cst, err := f.Stat()
	if err != nil {
		return Agent{}, err
	}
	if cid, ok := idOf(cst); !ok || cid.UID != id.UID {
		return Agent{}, fmt.Errorf("%w: %s is not owned by the owner of %s", ErrNoResolved, ResolvedPath(path), path)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return Agent{}, fmt.Errorf("%w: %s: %v", ErrNoResolved, ResolvedPath(path), err)
	}
	// The hook reads this on every job start: decodeResolved spares it
	// encoding/json's reflection (about 140 µs cold), and declines what it
	// is not sure of, which encoding/json then reads as it always did.
	r, ok := decodeResolved(b)
	if !ok {
		r = resolved{}
		if err := json.NewDecoder(bytes.NewReader(b)).Decode(&r); err != nil {
			return Agent{}, fmt.Errorf("%w: %s: %v", ErrNoResolved, ResolvedPath(path), err)
		}
	}
	switch {
	case r.Format != resolvedFormat, r.Build != build:
		return Agent{}, fmt.Errorf("%w: written by llmgw %s (format %d), this is %s", ErrNoResolved, r.Build, r.Format, build)
	case r.File != path, r.FileID != id:
		return Agent{}, fmt.Errorf("%w: %s changed since", ErrNoResolved, path)
	}
	return r.Config, nil
}

// decodeResolved decodes a resolved copy as encoding/json does, or returns
// false; see package jsonlite. resolved_test.go's fuzz test holds the two
// equal, and TestDecodeResolvedKnowsEveryField fails when Agent gains a
// field this does not read.
func decodeResolved(b []byte) (resolved, bool) {
	var r resolved
	s := jsonlite.New(b)
	ok := s.Object(func(name string) bool {
		var ok bool
		var n int64
		var u uint64
		switch name {
		case "format":
			n, ok = s.Int(strconv.IntSize)
			r.Format = int(n)
		case "build":
			r.Build, ok = s.String()
		case "file":
			r.File, ok = s.String()
		case "size":
			r.Size, ok = s.Int(64)
		case "mtime_ns":
			r.MtimeNS, ok = s.Int(64)
		case "ctime_ns":
			r.CtimeNS, ok = s.Int(64)
		case "ino":
			r.Ino, ok = s.Uint(64)
		case "dev":
			r.Dev, ok = s.Uint(64)
		case "uid":
			u, ok = s.Uint(32)
			r.UID = uint32(u)
		case "config":
			ok = s.Object(func(name string) bool { return decodeAgentField(s, &r.Config, name) })
		default:
			ok = jsonlite.Unknown(name, "format", "build", "file", "size", "mtime_ns", "ctime_ns", "ino", "dev", "uid", "config") && s.Skip()
		}
		return ok
	})
	// json.Decoder.Decode reads the first value and leaves the rest;
	// declining trailing data leaves that case to it.
	return r, ok && s.End()
}

// agentFields are Agent's JSON names: its Go field names (it has no json
// tags; the resolved copy is written by json.Marshal).
var agentFields = []string{"Coordinator", "TokenFile", "TLSCA", "MungeSocket", "Node", "Fabric", "WeightDirs", "CacheDir", "StateDir", "RunDir",
	"Socket", "MetricsListen", "ScanInterval", "ReportInterval", "DirTimeout", "Connections", "GPUMemory", "NvidiaSMI",
	"FetchDeadline", "GCInterval", "GCTimeout", "Version", "HFTokenFile", "CacheReserve", "FetchMinSpeed", "GCMaxShare", "GCPartMaxAge", "PeerAddr", "PeerInterface", "PeerPort",
	"CacheHigh", "CacheLow", "KeepLastCopyFor", "HookFSTimeout", "HFEndpoint", "HFCache", "HFHubOffline"}

func decodeAgentField(s *jsonlite.Scanner, c *Agent, name string) bool {
	var ok bool
	var n int64
	dur := func(d *time.Duration) {
		n, ok = s.Int(64)
		*d = time.Duration(n)
	}
	switch name {
	case "Coordinator":
		c.Coordinator, ok = s.String()
	case "TokenFile":
		c.TokenFile, ok = s.String()
	case "MungeSocket":
		c.MungeSocket, ok = s.String()
	case "TLSCA":
		c.TLSCA, ok = s.String()
	case "Node":
		c.Node, ok = s.String()
	case "Fabric":
		c.Fabric, ok = s.String()
	case "WeightDirs":
		c.WeightDirs, ok = s.Strings()
	case "CacheDir":
		c.CacheDir, ok = s.String()
	case "StateDir":
		c.StateDir, ok = s.String()
	case "RunDir":
		c.RunDir, ok = s.String()
	case "Socket":
		c.Socket, ok = s.String()
	case "MetricsListen":
		c.MetricsListen, ok = s.String()
	case "ScanInterval":
		dur(&c.ScanInterval)
	case "ReportInterval":
		dur(&c.ReportInterval)
	case "DirTimeout":
		dur(&c.DirTimeout)
	case "Connections":
		n, ok = s.Int(strconv.IntSize)
		c.Connections = int(n)
	case "GPUMemory":
		c.GPUMemory, ok = s.Int(64)
	case "NvidiaSMI":
		c.NvidiaSMI, ok = s.String()
	case "FetchDeadline":
		dur(&c.FetchDeadline)
	case "GCInterval":
		dur(&c.GCInterval)
	case "GCTimeout":
		dur(&c.GCTimeout)
	case "Version":
		c.Version, ok = s.String()
	case "HFTokenFile":
		c.HFTokenFile, ok = s.String()
	case "CacheReserve":
		c.CacheReserve, ok = s.Int(64)
	case "FetchMinSpeed":
		c.FetchMinSpeed, ok = s.Int(64)
	case "PeerAddr":
		c.PeerAddr, ok = s.String()
	case "PeerInterface":
		c.PeerInterface, ok = s.String()
	case "PeerPort":
		n, ok = s.Int(strconv.IntSize)
		c.PeerPort = int(n)
	case "GCPartMaxAge":
		dur(&c.GCPartMaxAge)
	case "KeepLastCopyFor":
		dur(&c.KeepLastCopyFor)
	case "HookFSTimeout":
		dur(&c.HookFSTimeout)
	case "CacheHigh":
		n, ok = s.Int(strconv.IntSize)
		c.CacheHigh = int(n)
	case "CacheLow":
		n, ok = s.Int(strconv.IntSize)
		c.CacheLow = int(n)
	case "HFEndpoint":
		c.HFEndpoint, ok = s.String()
	case "HFCache":
		c.HFCache, ok = s.String()
	case "HFHubOffline":
		var v bool
		v, ok = s.Bool()
		c.HFHubOffline = &v
	case "GCMaxShare":
		n, ok = s.Int(strconv.IntSize)
		c.GCMaxShare = int(n)
	default:
		ok = jsonlite.Unknown(name, agentFields...) && s.Skip()
	}
	return ok
}
