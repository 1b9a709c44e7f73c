package slurm

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Config holds Slurm's settings by key, the keys in lower case, since
// slurm.conf(5) keys are case-insensitive. A setting shown as "(null)" by
// scontrol, or absent, reads as "".
type Config map[string]string

// Get returns the value of key (any case) and whether it is set.
func (c Config) Get(key string) (string, bool) {
	v, ok := c[strings.ToLower(key)]
	return v, ok && v != ""
}

// All returns every value of a key that Slurm takes more than once (see
// listKeys), in Slurm's order, and nil when it is not set. From 24.05
// slurm.conf may hold several Prolog= (and Epilog=) lines, each run in
// turn, and `scontrol show config` prints them as Prolog[0], Prolog[1]...;
// 22.05 prints one "Prolog". ParseShowConfig keeps them as it finds them;
// ParseConf keeps the first line's under "key" (so Get sees it, as on
// 22.05) and the next ones' under "key[1]", "key[2]"...
func (c Config) All(key string) []string {
	k := strings.ToLower(key)
	var out []string
	if v, ok := c.Get(k); ok {
		out = append(out, v)
	}
	for i := 0; ; i++ {
		v, ok := c[k+"["+strconv.Itoa(i)+"]"]
		if !ok && i > 0 {
			return out
		}
		if v != "" {
			out = append(out, v)
		}
	}
}

// add appends a value to a key Slurm takes more than once.
func (c Config) add(key, v string) {
	if n := len(c.All(key)); n > 0 {
		key += "[" + strconv.Itoa(n) + "]"
	}
	c[key] = v
}

// listed reports whether k is a value of a listKeys key: "prolog",
// "prolog[1]".
func listed(k string) (base string, ok bool) {
	base, _, _ = strings.Cut(k, "[")
	return base, listKeys[base]
}

// A Version is a Slurm release, as `scontrol --version` prints it.
type Version struct{ Major, Minor, Micro int }

func (v Version) String() string { return fmt.Sprintf("%d.%02d.%d", v.Major, v.Minor, v.Micro) }

// Release is the major.minor a plugin must be built for: Slurm loads a
// plugin only when its plugin_version has the same major and minor.
func (v Version) Release() string { return fmt.Sprintf("%d.%02d", v.Major, v.Minor) }

// AtLeast reports whether v is release major.minor or later.
func (v Version) AtLeast(major, minor int) bool {
	return v.Major > major || v.Major == major && v.Minor >= minor
}

// ParseVersion reads `scontrol --version` (or sinfo's): "slurm 22.05.8",
// Debian's "slurm-wlm 24.11.5", a pre-release's "slurm 25.05.0-0rc1".
func ParseVersion(out []byte) (Version, error) {
	f := strings.Fields(string(out))
	if len(f) == 2 && strings.HasPrefix(f[0], "slurm") {
		var v Version
		num, _, _ := strings.Cut(f[1], "-")
		if _, err := fmt.Sscanf(num, "%d.%d.%d", &v.Major, &v.Minor, &v.Micro); err == nil {
			return v, nil
		}
	}
	return Version{}, fmt.Errorf("scontrol --version printed %q, not \"slurm X.Y.Z\"", strings.TrimSpace(string(out)))
}

// Version asks scontrol which Slurm this host runs (no controller needed).
func (r *Runner) Version(ctx context.Context) (Version, error) {
	out, err := r.Run(ctx, "scontrol", "--version")
	if err != nil {
		return Version{}, err
	}
	return ParseVersion(out)
}

// listKeys are the slurm.conf keys that may be given more than once, each
// line adding a value (slurm.conf(5) of 24.05 and later) rather than
// replacing the last.
var listKeys = map[string]bool{"prolog": true, "epilog": true, "prologslurmctld": true, "epilogslurmctld": true,
	// One line per controller, the primary first (`scontrol show config`:
	// SlurmctldHost[0], SlurmctldHost[1]...).
	"slurmctldhost": true}

// PrologTimeout returns how long slurmd lets the Prolog run, in the words
// of the setting that decides it: PrologTimeout (25.05 and later) when set,
// which then overrides PrologEpilogTimeout; else PrologEpilogTimeout; ""
// when neither is set (no limit).
func (c Config) PrologTimeout() (value, key string) {
	if v, ok := c.Get("PrologTimeout"); ok {
		return v, "PrologTimeout"
	}
	v, _ := c.Get("PrologEpilogTimeout")
	return v, "PrologEpilogTimeout"
}

// ShowConfig asks the running slurmctld for its configuration
// (`scontrol show config`). That is the controller's view: the settings
// slurmd uses on a node come from the node's own slurm.conf (ReadConf).
func (r *Runner) ShowConfig(ctx context.Context) (Config, error) {
	out, err := r.Run(ctx, "scontrol", "show", "config")
	if err != nil {
		return nil, err
	}
	return ParseShowConfig(out)
}

// ParseShowConfig parses the output of `scontrol show config`: a header line,
// "Key = value" lines (keys padded with spaces), blank lines between the
// sections of plugin settings, and a last line saying whether the
// controller is up. It does no I/O, so it is tested on captured output.
func ParseShowConfig(out []byte) (Config, error) {
	c := Config{}
	for _, line := range strings.Split(string(out), "\n") {
		k, v, ok := strings.Cut(line, " = ")
		if !ok {
			continue // the header, section titles, blank lines, "Slurmctld(primary) at h is UP"
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if k == "" || strings.ContainsAny(k, " \t") {
			continue
		}
		if v == "(null)" {
			v = ""
		}
		c[strings.ToLower(k)] = v
	}
	if len(c) == 0 {
		return nil, fmt.Errorf("scontrol show config: no \"Key = value\" lines in its output (%d bytes)", len(out))
	}
	return c, nil
}

// confLines returns the logical lines of a Slurm config file, read as
// Slurm's own parser reads them (src/common/parse_config.c, _get_next_line),
// so that llmgw never sees a setting other than the one Slurm runs:
//
//   - a '#' ends the line, unless an odd number of backslashes precedes it;
//   - a line whose end, trailing whitespace aside, is an odd run of
//     backslashes goes on with the next one: the last backslash and what
//     follows it are dropped and the next line is appended as it is, its
//     leading whitespace kept ("A=x \" then "B=y" is "A=x B=y"; "A=x,\"
//     then "  y" is "A=x,  y", a file Slurm refuses: the value ends at
//     the kept whitespace);
//   - then a backslash stands for the character after it ("\#" is '#',
//     "\\" is a backslash).
//
// Blank lines are dropped and each line is trimmed.
func confLines(b []byte) []string {
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	var joined strings.Builder
	for sc.Scan() {
		line := stripComment(sc.Text())
		if body, ok := cutContinuation(line); ok {
			joined.WriteString(body)
			continue
		}
		joined.WriteString(line)
		if l := strings.TrimSpace(unescape(joined.String())); l != "" {
			lines = append(lines, l)
		}
		joined.Reset()
	}
	if l := strings.TrimSpace(unescape(joined.String())); l != "" {
		lines = append(lines, l) // a continuation on the last line
	}
	return lines
}

// stripComment cuts line at the first '#' that an even number of
// backslashes (none included) precedes.
func stripComment(line string) string {
	bs := 0
	for i := 0; i < len(line); i++ {
		switch line[i] {
		case '#':
			if bs%2 == 0 {
				return line[:i]
			}
			bs = 0
		case '\\':
			bs++
		default:
			bs = 0
		}
	}
	return line
}

// cutContinuation reports whether line continues on the next one and, if
// so, returns it without the continuing backslash and the whitespace after
// it.
func cutContinuation(line string) (string, bool) {
	end := strings.TrimRight(line, confSpace)
	run := len(end) - len(strings.TrimRight(end, `\`))
	if run%2 == 0 {
		return line, false
	}
	return end[:len(end)-1], true
}

// unescape drops each backslash and keeps the character after it.
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			i++
			if i == len(s) {
				break
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// confSpace is what C's isspace() calls whitespace.
const confSpace = " \t\n\v\f\r"

// A confPair is one key=value of a slurm.conf line.
type confPair struct{ key, value string }

// confPairs splits a logical line into its key=value pairs as Slurm's
// key-value pattern does: a key of letters, digits, '_' and '.', an
// optional operator (-, +, * or /, which is dropped), '=', then a value in
// double quotes, which may hold whitespace, or a run without whitespace.
// A node or partition line holds many ("NodeName=n1 CPUs=4"). The split
// stops at the first text that is not a pair, where Slurm would stop with
// a parse error.
func confPairs(line string) []confPair {
	var out []confPair
	rest := line
	for {
		rest = strings.TrimLeft(rest, confSpace)
		k := 0
		for k < len(rest) && isKeyByte(rest[k]) {
			k++
		}
		if k == 0 {
			return out
		}
		key, r := rest[:k], strings.TrimLeft(rest[k:], confSpace)
		if r != "" && strings.IndexByte("-+*/", r[0]) >= 0 {
			r = r[1:]
		}
		if r == "" || r[0] != '=' {
			return out
		}
		r = strings.TrimLeft(r[1:], confSpace)
		var value string
		if quoted, tail, ok := cutQuoted(r); ok {
			value, r = quoted, tail
		} else {
			n := strings.IndexAny(r, confSpace)
			if n < 0 {
				n = len(r)
			}
			if n == 0 {
				return out // "Key=" and nothing: Slurm's pattern wants a value
			}
			value, r = r[:n], r[n:]
		}
		if r != "" && strings.IndexByte(confSpace, r[0]) < 0 {
			return out
		}
		out = append(out, confPair{key, value})
		rest = r
	}
}

// cutQuoted reads a value in double quotes at the start of s.
func cutQuoted(s string) (value, rest string, ok bool) {
	if !strings.HasPrefix(s, `"`) {
		return "", s, false
	}
	end := strings.IndexByte(s[1:], '"')
	if end < 0 {
		return "", s, false
	}
	return s[1 : 1+end], s[2+end:], true
}

func isKeyByte(c byte) bool {
	return c == '_' || c == '.' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// tableKeys start the lines of slurm.conf that define an entity (a node, a
// partition...) rather than set one parameter.
var tableKeys = map[string]bool{
	"nodename": true, "partitionname": true, "nodeset": true, "frontendname": true, "downnodes": true,
}

// ParseConf reads the parameter lines of a slurm.conf ("Key=value", one to
// a line, as Slurm requires; a later line wins, as in Slurm) and the files
// it Includes. It does no I/O: the
// includes are returned for the caller to read. Node and partition
// definitions are left out.
func ParseConf(b []byte) (c Config, includes []string) {
	c = Config{}
	for _, line := range confLines(b) {
		if f := strings.Fields(line); strings.EqualFold(f[0], "include") && len(f) > 1 {
			includes = append(includes, f[1])
			continue
		}
		// Slurm reads one parameter from the line and refuses the file when
		// anything but whitespace follows it (observed with 22.05's
		// scontrol); what follows is ignored here.
		pairs := confPairs(line)
		if len(pairs) == 0 || tableKeys[strings.ToLower(pairs[0].key)] {
			continue
		}
		k := strings.ToLower(pairs[0].key)
		if listKeys[k] {
			c.add(k, pairs[0].value)
			continue
		}
		c[k] = pairs[0].value
	}
	return c, includes
}

// ReadConf reads the slurm.conf at path and the files it includes (relative
// ones from path's directory, globs expanded), as slurmd and slurmctld do.
func ReadConf(path string) (Config, error) {
	c := Config{}
	err := readIncluding(path, 0, func(file string, b []byte) []string {
		part, incs := ParseConf(b)
		for k, v := range part {
			if _, ok := listed(k); !ok {
				c[k] = v
			}
		}
		// Each file's lines add to those of the files before it.
		for base := range listKeys {
			for _, v := range part.All(base) {
				c.add(base, v)
			}
		}
		return incs
	})
	return c, err
}

// A SpankPlugin is one plugin line of plugstack.conf.
type SpankPlugin struct {
	// Required: a plugin that fails to load fails the job; optional ones
	// are skipped.
	Required bool
	// Path is as written: absolute, or relative to Slurm's PluginDir.
	Path string
	Args []string
	// File is the plugstack file the line is in.
	File string
}

// ParsePlugstack reads the plugin lines ("optional|required PATH [ARGS]")
// and include lines of a plugstack.conf (spank(8)). It does no I/O.
func ParsePlugstack(b []byte) (plugins []SpankPlugin, includes []string, err error) {
	for _, line := range confLines(b) {
		f := strings.Fields(line)
		switch strings.ToLower(f[0]) {
		case "include":
			if len(f) < 2 {
				return nil, nil, fmt.Errorf("plugstack line %q: include without a path", line)
			}
			includes = append(includes, f[1:]...)
		case "optional", "required":
			if len(f) < 2 {
				return nil, nil, fmt.Errorf("plugstack line %q: no plugin path", line)
			}
			plugins = append(plugins, SpankPlugin{Required: strings.EqualFold(f[0], "required"), Path: f[1], Args: f[2:]})
		default:
			return nil, nil, fmt.Errorf("plugstack line %q: want \"optional PATH\", \"required PATH\" or \"include GLOB\"", line)
		}
	}
	return plugins, includes, nil
}

// ReadPlugstack reads the plugstack.conf at path and the files it includes.
// A plugstack.conf that does not exist loads no plugins, as in Slurm; one
// that cannot be parsed is an error.
func ReadPlugstack(path string) ([]SpankPlugin, error) {
	var all []SpankPlugin
	var perr error
	err := readIncluding(path, 0, func(file string, b []byte) []string {
		ps, incs, err := ParsePlugstack(b)
		if err != nil && perr == nil {
			perr = fmt.Errorf("%s: %w", file, err)
		}
		for i := range ps {
			ps[i].File = file
		}
		all = append(all, ps...)
		return incs
	})
	if err != nil {
		return nil, err
	}
	return all, perr
}

// readIncluding reads path and hands it to parse, which returns the files it
// includes; those are read in turn, relative ones from the including file's
// directory, globs expanded. An include glob that matches nothing is no
// error (Debian's plugstack.conf includes an often empty plugstack.conf.d).
func readIncluding(path string, depth int, parse func(file string, b []byte) []string) error {
	if depth > maxIncludeDepth {
		return fmt.Errorf("read %s: includes nested deeper than %d", path, maxIncludeDepth)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for _, inc := range parse(path, b) {
		if !filepath.IsAbs(inc) {
			inc = filepath.Join(filepath.Dir(path), inc)
		}
		matches, err := filepath.Glob(inc)
		if err != nil {
			return fmt.Errorf("%s: include %s: %w", path, inc, err)
		}
		if matches == nil && !strings.ContainsAny(inc, "*?[") {
			matches = []string{inc} // a plain path that is missing is an error
		}
		for _, m := range matches {
			if err := readIncluding(m, depth+1, parse); err != nil {
				return err
			}
		}
	}
	return nil
}

// IgnoresPreferValidation says whether SchedulerParameters holds
// ignore_prefer_validation (from 22.05.6): Slurm then accepts a --prefer
// no node can meet and falls back to the constraint (docs/slurm/RELEASES.md,
// "ignore_prefer_validation"). Parameters are case-insensitive to Slurm.
func IgnoresPreferValidation(c Config) bool {
	for _, v := range c.All("SchedulerParameters") {
		for _, p := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(p), "ignore_prefer_validation") {
				return true
			}
		}
	}
	return false
}

// NodeFeaturesPlugins are the node_features plugins slurmctld runs
// (NodeFeaturesPlugins, e.g. node_features/helpers), none when unset.
// With one, an ActiveFeatures update is not what it says: slurmctld passes
// it through the plugin's node_xlate, which for node_features/helpers
// keeps every current active feature the plugin does not manage
// ("merged = new_features U (orig_features - changeable_features)") and for
// node_features/knl_generic makes every available feature of a KNL node
// active (src/plugins/node_features/*, 22.05 to 26.05).
func NodeFeaturesPlugins(c Config) []string {
	var out []string
	for _, v := range c.All("NodeFeaturesPlugins") {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" && p != "(null)" {
				out = append(out, p)
			}
		}
	}
	return out
}
