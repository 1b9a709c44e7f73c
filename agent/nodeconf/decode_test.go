package nodeconf

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fullAgent sets every field of Agent, so that a field decodeResolved
// does not read makes TestDecodeResolvedKnowsEveryField fail.
func fullAgent(t testing.TB) Agent {
	a := Agent{Coordinator: "http://c:8420/?a=1&b=<2>", TokenFile: "/etc/llmgw/token", TLSCA: "/etc/llmgw/ca.pem", MungeSocket: "/run/munge/munge.socket.2", Node: "n1", Fabric: "ib-a",
		WeightDirs: []string{"/w/1", "/w/é\t2"}, CacheDir: "/c", StateDir: "/s", RunDir: "/r", Socket: "/r/s", MetricsListen: "127.0.0.1:9482",
		ScanInterval: time.Minute, ReportInterval: -time.Second, DirTimeout: 1, Connections: 16, GPUMemory: 80 << 30,
		NvidiaSMI: "/usr/bin/nvidia-smi", FetchDeadline: time.Hour, GCInterval: 2 * time.Minute, GCTimeout: time.Second, Version: "v1",
		HFTokenFile: "/etc/llmgw/hf.token", CacheReserve: 1 << 30, FetchMinSpeed: 1 << 20,
		GCMaxShare: 30, GCPartMaxAge: time.Hour, PeerAddr: "10.1.0.1:8421", PeerInterface: "ib0", PeerPort: 8421,
		CacheHigh: 85, CacheLow: 70, KeepLastCopyFor: 48 * time.Hour, HookFSTimeout: 20 * time.Second,
		HFEndpoint: "http://mirror:8080", HFCache: "/shared/hf/hub", HFHubOffline: new(bool)}
	v := reflect.ValueOf(a)
	for i := 0; i < v.NumField(); i++ {
		if v.Field(i).IsZero() {
			t.Fatalf("fullAgent leaves Agent.%s zero; set it", v.Type().Field(i).Name)
		}
	}
	if len(agentFields) != v.NumField() {
		t.Fatalf("agentFields names %d fields, Agent has %d", len(agentFields), v.NumField())
	}
	return a
}

func resolvedSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	for _, r := range []resolved{
		{},
		{Format: resolvedFormat, Build: "a104403", File: "/etc/llmgw/agent.toml", FileID: FileID{Size: 10, MtimeNS: 1, CtimeNS: 2, Ino: 1 << 63, Dev: 65024, UID: 1<<32 - 1}, Config: fullAgent(t)},
		{Format: -1, Config: Agent{WeightDirs: []string{}}},
		{Format: resolvedFormat, Config: Agent{}.WithDefaults()},
	} {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, b)
	}
	for _, s := range []string{
		`{}`, `null`, `{"config":null}`, `{"config":{"WeightDirs":null}}`, `{"config":{"WeightDirs":[null]}}`,
		`{"config":{"weightdirs":["a"]}}`, `{"config":{"CacheDir":"a","CacheDir":"b"}}`, `{"Format":1}`, `{"format":1.0}`,
		`{"uid":4294967296}`, `{"uid":-1}`, `{"ino":18446744073709551615}`, `{"ino":18446744073709551616}`, `{"dev":-0}`,
		`{"format":1} trailing`, `{"format":1}{"format":2}`, `{"format":1}` + "\n", `{"build":"\u0061\ud83d\ude00"}`,
		`{"config":{"ScanInterval":"1m"}}`, `{"config":{"Connections":9223372036854775807}}`, `{"config":{"Unknown":[{}]}}`,
		`{"config":{"Cache\u0044ir":"x"}}`, `{"config":{"HFHubOffline":true}}`, `{"config":{"HFHubOffline":null}}`, `{"config":{"HFHubOffline":1}}`, `{"conﬁg":{}}`, `{"config":{"CacheDir":"a"}`, `{"config":[]}`, ``, `{"file":"a\x00"}`,
	} {
		seeds = append(seeds, []byte(s))
	}
	return seeds
}

// checkDecodeResolved holds decodeResolved to what ReadResolved did before
// it: json.Decoder.Decode of the first value.
func checkDecodeResolved(t *testing.T, b []byte) {
	got, ok := decodeResolved(b)
	if !ok {
		return
	}
	var want resolved
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&want); err != nil {
		t.Fatalf("decodeResolved(%q) accepted what encoding/json rejects: %v", b, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decodeResolved(%q) = %#v, encoding/json gives %#v", b, got, want)
	}
}

func TestDecodeResolvedKnowsEveryField(t *testing.T) {
	seeds := resolvedSeeds(t)
	for _, b := range seeds {
		checkDecodeResolved(t, b)
	}
	// What WriteResolved writes must take the fast way, or the hook pays
	// for encoding/json again without anyone noticing.
	for _, b := range seeds[:4] {
		if _, ok := decodeResolved(b); !ok {
			t.Errorf("decodeResolved declined a copy as WriteResolved writes it: %s", b)
		}
	}
	if r, ok := decodeResolved(seeds[1]); !ok || !reflect.DeepEqual(r.Config, fullAgent(t)) {
		t.Errorf("decodeResolved lost settings: %+v, want %+v", r.Config, fullAgent(t))
	}
	if _, ok := decodeResolved([]byte(strings.Replace(string(seeds[1]), `"Version"`, `"version"`, 1))); ok {
		t.Error("decodeResolved read a case-folded field name itself; encoding/json's matching is for encoding/json")
	}
}

func FuzzDecodeResolved(f *testing.F) {
	for _, b := range resolvedSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(checkDecodeResolved)
}

// TestReadResolvedSlowWay: a copy decodeResolved declines is read by
// encoding/json as before, and a torn one is no copy.
func TestReadResolvedSlowWay(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "agent.toml")
	os.WriteFile(file, []byte("cache_dir = \"/c\"\n"), 0o644)
	cfg := Agent{CacheDir: "/c"}.WithDefaults()
	id, err := StatFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteResolved(file, id, "v1", cfg); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(ResolvedPath(file))
	folded := bytes.Replace(b, []byte(`"CacheDir"`), []byte(`"cachedir"`), 1)
	if _, ok := decodeResolved(folded); ok {
		t.Fatal("decodeResolved read a case-folded name; this test needs one it declines")
	}
	os.WriteFile(ResolvedPath(file), folded, 0o644)
	if got, err := ReadResolved(file, "v1"); err != nil || !reflect.DeepEqual(got, cfg) {
		t.Errorf("ReadResolved(declined copy) = %+v, %v; want %+v", got, err, cfg)
	}
	os.WriteFile(ResolvedPath(file), b[:len(b)/2], 0o644)
	if _, err := ReadResolved(file, "v1"); !errors.Is(err, ErrNoResolved) {
		t.Errorf("ReadResolved(torn copy) = %v, want ErrNoResolved", err)
	}
}
