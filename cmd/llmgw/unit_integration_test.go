//go:build integration

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/llmgw/coordinator"
	"golang.org/x/sys/unix"
)

// The unit this test runs the coordinator as, and the files the package
// installs, as the repository has them (the test runs in cmd/llmgw).
const (
	coordUnitFile = "../../packaging/systemd/llmgw-coordinator.service"
	packagedEtc   = "../../packaging/etc/llmgw"
)

// unitService is the [Service] section of a unit file: each directive's
// values in order (a directive may be given more than once).
type unitService map[string][]string

// parseUnitService reads the [Service] section of a systemd unit.
func parseUnitService(t *testing.T, path string) unitService {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, section := unitService{}, ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[':
			section = line
		case section == "[Service]":
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("%s: %q is not KEY=VALUE", path, line)
			}
			s[k] = append(s[k], v)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return s
}

// last is a single-valued directive as systemd reads it: the last one wins.
func (s unitService) last(k string) string {
	if v := s[k]; len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

// words is a list directive: its values, each split at spaces.
func (s unitService) words(k string) []string {
	var out []string
	for _, v := range s[k] {
		out = append(out, strings.Fields(v)...)
	}
	return out
}

// unitBool is a systemd boolean.
func unitBool(v string) bool {
	return slices.Contains([]string{"1", "yes", "y", "true", "t", "on"}, strings.ToLower(v))
}

// The [Service] directives this test knows. Those that shape the sandbox
// are modelled by unitSandbox; the others change nothing a test on one
// host can observe, and each says why. A directive not listed fails the
// test, so hardening added to the unit is never silently left out.
var unitDirectives = map[string]string{
	"ExecStart": "", "User": "", "Group": "", "LoadCredential": "", "StateDirectory": "",
	"ReadWritePaths": "", "ProtectSystem": "", "ProtectHome": "", "PrivateTmp": "",
	"NoNewPrivileges":       "", // setpriv --no-new-privs
	"ProtectKernelTunables": "", // /proc/sys and /sys read-only
	"ProtectControlGroups":  "", // /sys/fs/cgroup, under /sys
	"Type":                  "READY=1 needs systemd's NOTIFY_SOCKET; the test waits for /readyz instead",
	"Restart":               "restarts are systemd's",
	"RestartSec":            "restarts are systemd's",
	"PrivateDevices":        "the coordinator opens no device but /dev/null and /dev/urandom, which PrivateDevices keeps",
	"ProtectKernelModules":  "a process without capabilities (any non-root user) cannot load modules either",
	"RestrictSUIDSGID":      "a seccomp filter on making set-id files, which the coordinator never does",
}

// sandbox is how the unit runs the coordinator, from its directives.
type sandbox struct {
	// exe is the binary under test, seen as sandboxExe inside, and etc
	// the checkout's packaged /etc/llmgw, seen as sandboxEtc.
	exe, etc    string
	user, group string
	uid, gid    int
	exec        []string // ExecStart, paths as installed
	creds       [][2]string
	stateDirs   []string // StateDirectory, as /var/lib/NAME
	rwPaths     []string // ReadWritePaths
	protectSys  string
	protectHome string
	privateTmp  bool
	noNewPrivs  bool
	kernelTunRO bool
}

func unitSandbox(t *testing.T, s unitService) sandbox {
	t.Helper()
	for k := range s {
		if _, ok := unitDirectives[k]; !ok {
			t.Errorf("%s sets %s=, which this test does not model: add it to unitSandbox (or to unitDirectives with the reason it changes nothing here)", coordUnitFile, k)
		}
	}
	sb := sandbox{user: s.last("User"), group: s.last("Group"), exec: strings.Fields(s.last("ExecStart")),
		protectSys: s.last("ProtectSystem"), protectHome: s.last("ProtectHome"),
		privateTmp: unitBool(s.last("PrivateTmp")), noNewPrivs: unitBool(s.last("NoNewPrivileges")),
		kernelTunRO: unitBool(s.last("ProtectKernelTunables")) || unitBool(s.last("ProtectControlGroups")),
		rwPaths:     s.words("ReadWritePaths")}
	if sb.user == "" || sb.user == "root" {
		t.Fatalf("%s runs the coordinator as %q: it must run as SlurmUser (issue 16)", coordUnitFile, sb.user)
	}
	if sb.group == "" {
		sb.group = sb.user
	}
	u, err := user.Lookup(sb.user)
	if err != nil {
		t.Fatalf("User=%s of %s: %v", sb.user, coordUnitFile, err)
	}
	g, err := user.LookupGroup(sb.group)
	if err != nil {
		t.Fatalf("Group=%s of %s: %v", sb.group, coordUnitFile, err)
	}
	sb.uid, _ = strconv.Atoi(u.Uid)
	sb.gid, _ = strconv.Atoi(g.Gid)
	for _, d := range s.words("StateDirectory") {
		sb.stateDirs = append(sb.stateDirs, filepath.Join("/var/lib", d))
	}
	for _, c := range s["LoadCredential"] {
		id, src, ok := strings.Cut(c, ":")
		if !ok {
			t.Fatalf("LoadCredential=%s: want ID:PATH", c)
		}
		sb.creds = append(sb.creds, [2]string{id, src})
	}
	switch sb.protectSys {
	case "strict", "full", "yes", "true", "no", "false", "":
	default:
		t.Fatalf("ProtectSystem=%s: the test knows strict, full, yes and no", sb.protectSys)
	}
	switch sb.protectHome {
	case "yes", "true", "read-only", "tmpfs", "no", "false", "":
	default:
		t.Fatalf("ProtectHome=%s: the test knows yes, read-only, tmpfs and no", sb.protectHome)
	}
	return sb
}

// writable is every path systemd leaves writable besides the private
// /tmp: ReadWritePaths and, under ProtectSystem=strict, the StateDirectory
// (systemd.exec(5): those directories stay writable).
func (sb sandbox) writable() []string {
	w := slices.Clone(sb.rwPaths)
	if sb.protectSys == "strict" {
		w = append(w, sb.stateDirs...)
	}
	slices.Sort(w)
	return slices.Compact(w)
}

// setReadACL gives uid read (and, for a directory, search) access to path
// with a POSIX ACL, as systemd gives the service user its credentials: the
// file or directory stays root's, mode 0400 or 0500, and stat then shows
// the ACL's mask in the group bits. The xattr is the kernel's
// posix_acl_xattr format: a version, then (tag, perm, id) entries sorted
// by tag.
func setReadACL(t *testing.T, path string, uid int, dir bool) {
	t.Helper()
	perm := uint16(4)
	if dir {
		perm = 5
	}
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint32(2))
	for _, e := range []struct {
		tag, perm uint16
		id        uint32
	}{{0x01, perm, ^uint32(0)}, {0x02, perm, uint32(uid)}, {0x04, 0, ^uint32(0)}, {0x10, perm, ^uint32(0)}, {0x20, 0, ^uint32(0)}} {
		binary.Write(&b, binary.LittleEndian, e)
	}
	if err := unix.Setxattr(path, "system.posix_acl_access", b.Bytes(), 0); err != nil {
		t.Fatalf("set an ACL on %s as systemd does for credentials (the file system must support POSIX ACLs): %v", path, err)
	}
}

// makeMountpoint makes dir exist to mount on, and removes what it made when the
// test ends (a bind mount needs an existing directory; the namespace's
// mounts go with it).
func makeMountpoint(t *testing.T, dir string) {
	t.Helper()
	top := dir
	for p := dir; p != "/"; p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil {
			break
		}
		top = p
	}
	if _, err := os.Stat(dir); err == nil {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for p := dir; ; p = filepath.Dir(p) {
			os.Remove(p) // only when empty
			if p == top {
				break
			}
		}
	})
}

// shq quotes s for sh.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// credsDir is where LoadCredential puts the unit's credentials.
func credsDir() string { return "/run/credentials/" + filepath.Base(coordUnitFile) }

// script is the sh script that builds the unit's sandbox in a new mount
// namespace (the caller unshares it) and
// execs argv as the unit's user with env only. standIn maps each
// StateDirectory to the directory standing for it; creds holds the
// credentials; keep are paths PrivateTmp would hide that stand for a
// site's /etc/slurm and /run/munge (the dev cluster lives under /var/tmp):
// they stay visible, read-only.
func (sb sandbox) script(standIn map[string]string, creds string, keep, env, argv []string) string {
	var s strings.Builder
	line := func(f string, a ...any) { fmt.Fprintf(&s, f+"\n", a...) }
	line("set -eu")
	// Nothing below may reach the test's namespace: every mount private.
	// Inside a release's root (a chroot) / is no mount point, so the
	// recursive form fails there (as Go's Unshareflags does, which is why
	// util-linux's unshare, with propagation unchanged, runs this).
	line("mount -n --make-rprivate / 2>/dev/null || awk '{print $5}' /proc/self/mountinfo | while read -r m; do mount -n --make-private \"$m\" 2>/dev/null || true; done")
	if sb.exe != "" {
		// The checkout's binary and packaged /etc/llmgw are seen at fixed
		// places, whatever the checkout's path: a clone under /tmp,
		// /var/tmp or /home is hidden by PrivateTmp or ProtectHome, and
		// the unit then failed with exit 127 ("No such file or
		// directory"). A tmpfs of the namespace's own holds the names; a
		// bind keeps the checkout's mount flags, so the binary stays
		// executable.
		line("mount -n -t tmpfs -o mode=0755 llmgw-checkout %s", shq(filepath.Dir(sandboxExe)))
		line(": > %s && mount -n --bind %s %s", shq(sandboxExe), shq(sb.exe), shq(sandboxExe))
		line("mkdir %s && mount -n --bind %s %s", shq(sandboxEtc), shq(sb.etc), shq(sandboxEtc))
	}
	for _, d := range sb.stateDirs {
		line("mount -n --bind %s %s", shq(standIn[d]), shq(d))
	}
	// A writable path must be a mount of its own to stay writable below.
	for _, w := range sb.writable() {
		if _, ok := standIn[w]; !ok {
			line("mount -n --bind %s %s", shq(w), shq(w))
		}
	}
	if len(sb.creds) > 0 {
		// As systemd does: a read-only tmpfs on /run/credentials, the
		// unit's own directory bound read-only in it.
		line("mount -n -t tmpfs -o mode=0755 llmgw-creds /run/credentials")
		line("mkdir %s", shq(credsDir()))
		line("mount -n --bind %s %s", shq(creds), shq(credsDir()))
		line("mount -n -o remount,bind,ro %s", shq(credsDir()))
		line("mount -n -o remount,ro /run/credentials")
	}
	if sb.kernelTunRO {
		line("mount -n --bind /proc/sys /proc/sys")
	}
	// Read-only: every mount under the trees ProtectSystem names (for
	// strict all but the API file systems /dev, /proc and /sys; /proc/sys
	// and /sys too with ProtectKernelTunables). mountinfo's 5th field is the
	// mount point, octal-escaped; one another mount hides is skipped.
	var ro []string
	switch sb.protectSys {
	case "strict":
		ro = []string{"/"}
	case "full":
		ro = []string{"/usr", "/boot", "/efi", "/etc"}
	case "yes", "true":
		ro = []string{"/usr", "/boot", "/efi"}
	}
	api := "/dev|/dev/*|/proc|/proc/*|/sys|/sys/*) continue;;"
	if sb.kernelTunRO {
		api = "/dev|/dev/*|/proc) continue;; /proc/sys|/proc/sys/*) ;; /proc/*) continue;;"
	}
	for _, r := range ro {
		line("awk '{print $5}' /proc/self/mountinfo | sort -u | while read -r m; do")
		line(`  case $m in *\\*) m=$(printf '%%b' "$(printf '%%s' "$m" | sed 's/\\\([0-7][0-7][0-7]\)/\\0\1/g')");; esac`)
		line("  case $m in %s esac", api)
		if r != "/" {
			line("  case $m in %s|%s/*) ;; *) continue;; esac", r, r)
		}
		line(`  mount -n -o remount,bind,ro "$m" 2>/dev/null || ! mountpoint -q "$m" || { echo "sandbox: cannot make $m read-only" >&2; exit 1; }`)
		line("done")
	}
	if sb.privateTmp {
		line("mount -n -t tmpfs -o mode=1777 llmgw-tmp /tmp")
		for i, k := range keep {
			line("mkdir /tmp/.keep%d && mount -n --bind %s /tmp/.keep%d", i, shq(k), i)
		}
		line("mount -n -t tmpfs -o mode=1777 llmgw-vartmp /var/tmp")
		for i, k := range keep {
			line("mkdir -p %s && mount -n --move /tmp/.keep%d %s && rmdir /tmp/.keep%d", shq(k), i, shq(k), i)
			line("mount -n -o remount,bind,ro %s", shq(k))
		}
	}
	home := map[string]string{"yes": "0000", "true": "0000", "tmpfs": "0755"}[sb.protectHome]
	if home != "" {
		for _, h := range []string{"/home", "/root", "/run/user"} {
			line("if [ -d %s ]; then mount -t tmpfs -o mode=%s,ro llmgw-home %s; fi", h, home, h)
		}
	}
	for _, w := range sb.writable() {
		line("mount -n -o remount,bind,rw %s", shq(w))
	}
	cmd := []string{"setpriv", "--reuid=" + strconv.Itoa(sb.uid), "--regid=" + strconv.Itoa(sb.gid), "--init-groups"}
	if sb.noNewPrivs {
		cmd = append(cmd, "--no-new-privs")
	}
	cmd = append(append(append(cmd, "--", "env", "-i"), env...), argv...)
	for i := range cmd {
		cmd[i] = shq(cmd[i])
	}
	line("exec %s", strings.Join(cmd, " "))
	return s.String()
}

// sandboxed is the coordinator running in the unit's sandbox.
type sandboxed struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited
	log  string
}

// startSandboxed runs script in a new mount namespace, logging to logf,
// and stops it (SIGTERM: the script execs the coordinator) when the test
// ends.
func startSandboxed(t *testing.T, script, logf string) *sandboxed {
	t.Helper()
	f, err := os.Create(logf)
	if err != nil {
		t.Fatal(err)
	}
	s := &sandboxed{done: make(chan struct{}), log: logf}
	s.cmd = exec.Command("unshare", "--mount", "--propagation", "unchanged", "--", "/bin/sh", "-c", script)
	s.cmd.Stdout, s.cmd.Stderr = f, f
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.cmd.Wait(); f.Close(); close(s.done) }()
	t.Cleanup(func() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			s.cmd.Process.Kill()
			<-s.done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logf)
			t.Logf("sandboxed coordinator log:\n%s", b)
		}
	})
	return s
}

// exited says whether it has exited.
func (s *sandboxed) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

func randomToken(t *testing.T) []byte {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return []byte(hex.EncodeToString(b) + "\n")
}

// unitRig is what the unit's sandbox is built from: stand-ins for the
// state directories and the credential sources, and the credentials
// directory as systemd fills it.
type unitRig struct {
	sb        sandbox
	standIn   map[string]string
	creds     string
	credSrc   map[string]string // credential id: the file standing for its source
	keep      []string
	conf      string
	configDir string
}

func newUnitRig(t *testing.T, sb sandbox, conf string) *unitRig {
	t.Helper()
	base := t.TempDir()
	r := &unitRig{sb: sb, standIn: map[string]string{}, credSrc: map[string]string{},
		creds: filepath.Join(base, "credentials"), keep: []string{filepath.Dir(conf)}, conf: conf}
	// StateDirectory: made for the unit's user, mode 0755, as systemd
	// does, at a path of the test's; bound where the unit has it.
	for _, d := range sb.stateDirs {
		st := filepath.Join(base, "state", filepath.Base(d))
		if err := os.MkdirAll(st, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(st, sb.uid, sb.gid); err != nil {
			t.Fatal(err)
		}
		r.standIn[d] = st
		makeMountpoint(t, d)
	}
	// LoadCredential: each source root's, mode 0600; the copy in the
	// credentials directory root's, mode 0400, the directory 0500, both
	// readable by the unit's user through an ACL (systemd's
	// exec-credential.c, on the tmpfs it uses since v256; on ramfs it
	// chowns to the user instead).
	if err := os.Mkdir(r.creds, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, c := range sb.creds {
		tok := randomToken(t)
		src := filepath.Join(base, "src", filepath.Base(c[1]))
		os.MkdirAll(filepath.Dir(src), 0o700)
		if err := os.WriteFile(src, tok, 0o600); err != nil {
			t.Fatal(err)
		}
		r.credSrc[c[0]] = src
		p := filepath.Join(r.creds, c[0])
		if err := os.WriteFile(p, tok, 0o400); err != nil {
			t.Fatal(err)
		}
		setReadACL(t, p, sb.uid, false)
	}
	if err := os.Chmod(r.creds, 0o500); err != nil {
		t.Fatal(err)
	}
	setReadACL(t, r.creds, sb.uid, true)
	if len(sb.creds) > 0 {
		makeMountpoint(t, "/run/credentials")
	}
	return r
}

// argv is the unit's ExecStart with the installed paths mapped to bin
// (the binary under test) and etc (the packaged /etc/llmgw files) and
// flags a test needs appended.
func (r *unitRig) argv(t *testing.T, bin, etc string, flags ...string) []string {
	t.Helper()
	var argv []string
	for i, a := range r.sb.exec {
		switch {
		case i == 0 && a == "/usr/bin/llmgw":
			a = bin
		case i == 0:
			t.Fatalf("ExecStart runs %s, not /usr/bin/llmgw: teach the test where the package puts it", a)
		case strings.HasPrefix(a, "/etc/llmgw/"):
			a = filepath.Join(etc, strings.TrimPrefix(a, "/etc/llmgw/"))
		}
		argv = append(argv, a)
	}
	return append(argv, flags...)
}

// env is the environment systemd gives a unit with User=.
func (r *unitRig) env() []string {
	e := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin", "HOME=/nonexistent",
		"USER=" + r.sb.user, "LOGNAME=" + r.sb.user, "SHELL=/usr/sbin/nologin"}
	if len(r.sb.creds) > 0 {
		e = append(e, "CREDENTIALS_DIRECTORY="+credsDir())
	}
	if len(r.sb.stateDirs) > 0 {
		e = append(e, "STATE_DIRECTORY="+strings.Join(r.sb.stateDirs, ":"))
	}
	return e
}

func (r *unitRig) start(t *testing.T, bin, name string, flags ...string) *sandboxed {
	t.Helper()
	sb := r.sb
	etc, err := filepath.Abs(packagedEtc)
	if err != nil {
		t.Fatal(err)
	}
	sb.exe, sb.etc = bin, etc
	return startSandboxed(t, sb.script(r.standIn, r.creds, r.keep, r.env(), r.argv(t, sandboxExe, sandboxEtc, flags...)),
		filepath.Join(t.TempDir(), name+".log"))
}

// sandboxExe and sandboxEtc are where the binary under test and the
// checkout's packaged /etc/llmgw are seen inside the sandbox (script binds
// them there): under /mnt, which no unit setting hides.
const (
	sandboxExe = "/mnt/llmgw"
	sandboxEtc = "/mnt/etc-llmgw"
)

// nodeFeatures is each node's features as sinfo lists them.
//
// A sinfo that fails gives no node, only the error (which the wait shows
// when it gives up): the test reads the features right after `scontrol
// reconfigure`, which on 24.11 restarts slurmctld (docs/slurm/RELEASES.md),
// and a read while it comes up is a miss for the wait around it to retry,
// not a failure.
func nodeFeatures(t *testing.T, ctx context.Context) map[string]string {
	t.Helper()
	// Active: presence; every node offers every catalog model (%f).
	out, err := exec.CommandContext(ctx, "sinfo", "-N", "-h", "-o", "%N %b").Output()
	if err != nil {
		return map[string]string{"(sinfo failed)": err.Error()}
	}
	m := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if n, f, ok := strings.Cut(l, " "); ok {
			m[n] = f
		}
	}
	return m
}

// TestCoordinatorUnitAsSlurmUser runs the real coordinator the way
// packaging/systemd/llmgw-coordinator.service does, its sandbox built from
// the unit's own directives: as the unit's User and Group, in a mount
// namespace where everything is read-only but the StateDirectory and
// ReadWritePaths, with a private empty /tmp and /var/tmp, /home and /root
// inaccessible, and its tokens where LoadCredential puts them (root's, read
// through an ACL, as systemd does), named by the packaged coordinator.toml
// as shipped. On the dev cluster with SlurmUser the unit's user
// (LLMGW_DEV_SLURM_USER=slurm): agents report for every node, and the
// coordinator sets their llmgw features with scontrol update (sinfo shows
// them), publishes them to its feature file in the state directory, sets
// them again after `scontrol reconfigure` wipes them, serves /readyz, and
// writes nothing it may not. A second coordinator in the same sandbox
// without the writable paths must fail: the sandbox is really read-only.
func TestCoordinatorUnitAsSlurmUser(t *testing.T) {
	bin, sl := clusterBin(t)
	ctx := context.Background()
	sb := unitSandbox(t, parseUnitService(t, coordUnitFile))
	if t.Failed() {
		t.FailNow()
	}
	cfg, err := sl.ShowConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := cfg.Get("SlurmUser")
	if su, _, _ := strings.Cut(v, "("); su != sb.user {
		t.Skipf("the dev cluster's SlurmUser is %q, not the unit's User %q: bring it up with LLMGW_DEV_SLURM_USER=%s", su, sb.user, sb.user)
	}
	// Whatever the test leaves on the nodes goes with a reconfigure, which
	// keeps slurm.conf's features; registered first, it runs last, once the
	// coordinator that could set them again has stopped.
	t.Cleanup(func() {
		if _, err := sl.Run(context.Background(), "scontrol", "reconfigure"); err != nil {
			t.Errorf("scontrol reconfigure: %v", err)
		}
	})
	conf := os.Getenv("SLURM_CONF")
	rig := newUnitRig(t, sb, conf)
	adminSrc := rig.credSrc["admin.token"]
	if adminSrc == "" {
		t.Fatalf("%s loads no admin.token credential; the packaged coordinator.toml names it", coordUnitFile)
	}

	// The sandbox is what the unit says, seen from inside as its user.
	t.Run("sandbox", func(t *testing.T) {
		probe := `id -un; id -gn
for p in / /etc /usr /var /var/lib /run; do mkdir "$p/llmgw-probe" 2>/dev/null && echo "wrote $p"; done
for p in /home /root; do if [ -d "$p" ]; then ls "$p" >/dev/null 2>&1 && echo "read $p"; fi; done
ls -A /tmp | grep -v '^$' | sed 's/^/in tmp: /'
for p in ` + strings.Join(sb.writable(), " ") + `; do touch "$p/llmgw-probe" && rm "$p/llmgw-probe" && echo "writable $p"; done
for c in ` + credsDir() + `/*; do [ -r "$c" ] && echo "credential $(basename "$c")"; done
touch /tmp/llmgw-probe /var/tmp/llmgw-probe 2>/dev/null && echo "private tmp writable"
`
		out := filepath.Join(t.TempDir(), "probe.log")
		p := startSandboxed(t, rig.sb.script(rig.standIn, rig.creds, rig.keep, rig.env(), []string{"/bin/sh", "-c", probe}), out)
		waitFor(t, 60*time.Second, "the probe in the sandbox", p.exited)
		b, _ := os.ReadFile(out)
		var want []string
		want = append(want, sb.user, sb.group)
		for _, w := range sb.writable() {
			want = append(want, "writable "+w)
		}
		var ids []string
		for _, c := range sb.creds {
			ids = append(ids, "credential "+c[0])
		}
		slices.Sort(ids) // as the shell's glob lists them
		want = append(want, ids...)
		if sb.privateTmp {
			want = append(want, "private tmp writable")
		}
		if got := strings.Split(strings.TrimSpace(string(b)), "\n"); !slices.Equal(got, want) {
			t.Errorf("in the sandbox, as %s: got\n%s\nwant\n%s", sb.user, b, strings.Join(want, "\n"))
		}
	})

	t.Run("read-only without its writable paths", func(t *testing.T) {
		bare := *rig
		bare.sb.rwPaths, bare.sb.protectSys = nil, "strict"
		bare.sb.stateDirs = nil
		bare.standIn = map[string]string{}
		c := bare.start(t, bin, "bare", "--listen", freeAddr(t))
		waitFor(t, 60*time.Second, "the coordinator without a writable state directory to exit", c.exited)
		b, _ := os.ReadFile(c.log)
		if c.cmd.ProcessState.Success() || !bytes.Contains(b, []byte(filepath.Dir(coordinator.DefaultDB))) {
			t.Errorf("without StateDirectory and ReadWritePaths the coordinator exited %v, saying:\n%s\nwant it unable to make its database in %s", c.cmd.ProcessState, b, filepath.Dir(coordinator.DefaultDB))
		}
	})

	addr := freeAddr(t)
	url := "http://" + addr
	c := rig.start(t, bin, "coordinator", "--listen", addr, "--features", "--feature-interval", "2s",
		"--report-interval", "1s", "--slurm-conf", conf)
	ready := func() bool {
		resp, err := http.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	}
	waitFor(t, 60*time.Second, "the sandboxed coordinator's /readyz", func() bool {
		if c.exited() {
			b, _ := os.ReadFile(c.log)
			t.Fatalf("the sandboxed coordinator exited (%v):\n%s", c.cmd.ProcessState, b)
		}
		return ready()
	})
	admin := []string{"LLMGW_COORDINATOR=" + url, "LLMGW_TOKEN_FILE=" + adminSrc}

	// Two models, each in a weights dir some nodes share (as a shared
	// mount would be); every node's agent reports with its own token.
	base := t.TempDir()
	held := map[string][]string{"n1": {"su-a"}, "n2": {"su-b"}, "n3": {"su-a"}, "n4": nil}
	fabric := map[string]string{"n1": "ib-a", "n2": "ib-a", "n3": "ib-b", "n4": "ib-b"}
	for _, m := range []string{"su-a", "su-b"} {
		p := filepath.Join(base, "shared-"+m, m+".gguf")
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, append([]byte("GGUF"), make([]byte, 4092)...), 0o644); err != nil {
			t.Fatal(err)
		}
		// Finished long ago: the scan takes a file modified within seconds
		// as still being written.
		then := time.Now().Add(-time.Minute)
		os.Chtimes(p, then, then)
		if out, errs, err := runBin(t, bin, admin, "models", "add", m, p); err != nil {
			t.Fatalf("models add %s: %v: %s%s", m, err, out, errs)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(held)) {
		nd := filepath.Join(base, n)
		dirs := []string{strconv.Quote(filepath.Join(nd, "weights"))}
		for _, sub := range []string{"weights", "cache", "state", "run"} {
			os.MkdirAll(filepath.Join(nd, sub), 0o755)
		}
		for _, m := range held[n] {
			dirs = append(dirs, strconv.Quote(filepath.Join(base, "shared-"+m)))
		}
		tok := filepath.Join(nd, "node.token")
		if out, errs, err := runBin(t, bin, admin, "nodes", "token", n, "--out", tok); err != nil {
			t.Fatalf("nodes token %s: %v: %s%s", n, err, out, errs)
		}
		toml := fmt.Sprintf("coordinator = %q\ntoken_file = %q\nnode = %q\nfabric = %q\nweight_dirs = [%s]\n"+
			"cache_dir = %q\nstate_dir = %q\nrun_dir = %q\nsocket = %q\nreport_interval = \"1s\"\nscan_interval = \"1s\"\n",
			url, tok, n, fabric[n], strings.Join(dirs, ", "), filepath.Join(nd, "cache"),
			filepath.Join(nd, "state"), filepath.Join(nd, "run"), filepath.Join(nd, "agent.sock"))
		cf := filepath.Join(nd, "agent.toml")
		if err := os.WriteFile(cf, []byte(toml), 0o644); err != nil {
			t.Fatal(err)
		}
		daemon(t, bin, nil, "agent", "--config", cf)
	}
	var lastSeen string
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(featureFilePath(rig))
			t.Logf("sinfo last showed %s; the feature file says:\n%s", lastSeen, b)
		}
	})
	want := map[string]string{}
	for n, ms := range held {
		fs := []string{fabric[n]}
		for _, m := range ms {
			fs = append(fs, "llmgw."+m)
		}
		slices.Sort(fs)
		want[n] = strings.Join(fs, ",")
	}
	inSlurm := func() bool {
		got := nodeFeatures(t, ctx)
		lastSeen = fmt.Sprint(got)
		for n, w := range want {
			if got[n] != w {
				return false
			}
		}
		return true
	}
	featureFile := featureFilePath(rig)
	if featureFile == "" {
		t.Fatalf("%s has no StateDirectory for %s, where the packaged coordinator.toml keeps the feature file and the database", coordUnitFile, filepath.Dir(coordinator.DefaultFeatureFile))
	}
	fileSays := func(since time.Time) bool {
		st, err := os.Stat(featureFile)
		if err != nil || st.ModTime().Before(since) {
			return false
		}
		b, _ := os.ReadFile(featureFile)
		for n, w := range want {
			if !bytes.Contains(b, []byte("\n"+n+" debug "+w+"\n")) {
				return false
			}
		}
		return true
	}
	t0 := time.Now()
	waitFor(t, 30*time.Second, "the llmgw features set by the sandboxed coordinator in Slurm (sinfo) and in "+featureFile, func() bool {
		return inSlurm() && fileSays(t0)
	})
	if st, err := os.Stat(featureFile); err != nil || st.Sys().(*syscall.Stat_t).Uid != uint32(sb.uid) {
		t.Errorf("the feature file %s: %v; want it written by %s", featureFile, err, sb.user)
	}

	// scontrol reconfigure wipes features set by scontrol; the coordinator
	// sets them again.
	if _, err := sl.Run(ctx, "scontrol", "reconfigure"); err != nil {
		t.Fatalf("scontrol reconfigure: %v", err)
	}
	tr := time.Now()
	t.Logf("right after scontrol reconfigure: %v", nodeFeatures(t, ctx))
	waitFor(t, 30*time.Second, "the llmgw features again after scontrol reconfigure", func() bool {
		return inSlurm() && fileSays(tr)
	})
	if !ready() {
		t.Errorf("%s/readyz is not 200 after the reconfigure", url)
	}
	if c.exited() {
		t.Fatalf("the sandboxed coordinator exited: %v", c.cmd.ProcessState)
	}
	if ents, err := os.ReadDir(filepath.Dir(featureFile)); err == nil {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Logf("the coordinator wrote in its state directory: %s", strings.Join(names, " "))
	}
	b, _ := os.ReadFile(c.log)
	for _, bad := range []string{"read-only file system", "permission denied", "Invalid user id", "Access/permission denied"} {
		if bytes.Contains(bytes.ToLower(b), bytes.ToLower([]byte(bad))) {
			t.Errorf("the sandboxed coordinator's log says %q: it needs a path or a right the unit does not give:\n%s", bad, b)
		}
	}
}

// featureFilePath is where the packaged coordinator.toml's feature_file
// (the default, in the StateDirectory) is outside the sandbox; "" when no
// StateDirectory holds it.
func featureFilePath(rig *unitRig) string {
	d := filepath.Dir(coordinator.DefaultFeatureFile)
	if rig.standIn[d] == "" {
		return ""
	}
	return filepath.Join(rig.standIn[d], filepath.Base(coordinator.DefaultFeatureFile))
}
