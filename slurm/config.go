package slurm

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
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

// confLines returns the logical lines of a Slurm config file: comments
// ('#' to the end of the line) removed, a line ending in a backslash joined
// to the next, blank lines dropped.
func confLines(b []byte) []string {
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	var cont string
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		if cont != "" {
			// A continued value goes on where it stopped:
			// "A=x,\" + "  y" is "A=x,y".
			line = strings.TrimLeft(line, " \t")
		}
		if s, ok := strings.CutSuffix(strings.TrimRight(line, " \t\r"), `\`); ok {
			cont += s
			continue
		}
		line, cont = strings.TrimSpace(cont+line), ""
		if line != "" {
			lines = append(lines, line)
		}
	}
	return lines
}

// tableKeys start the lines of slurm.conf that define an entity (a node, a
// partition...) rather than set one parameter.
var tableKeys = map[string]bool{
	"nodename": true, "partitionname": true, "nodeset": true, "frontendname": true, "downnodes": true,
}

// ParseConf reads the parameter lines of a slurm.conf ("Key=value"; a later
// line wins, as in Slurm) and the files it Includes. It does no I/O: the
// includes are returned for the caller to read. Node and partition
// definitions are left out.
func ParseConf(b []byte) (c Config, includes []string) {
	c = Config{}
	for _, line := range confLines(b) {
		if f := strings.Fields(line); strings.EqualFold(f[0], "include") && len(f) > 1 {
			includes = append(includes, f[1])
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		k = strings.ToLower(strings.TrimSpace(k))
		if tableKeys[k] || strings.ContainsAny(k, " \t") {
			continue
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = v[1 : len(v)-1]
		}
		c[k] = v
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
			c[k] = v
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
