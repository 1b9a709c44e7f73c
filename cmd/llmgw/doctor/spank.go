package doctor

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"

	"github.com/llmgw/llmgw/slurm"
)

// pluginVersion reads the Slurm release a plugin was built for: the value
// of its plugin_version symbol, which SPANK_PLUGIN() sets to the
// SLURM_VERSION_NUMBER of the headers it was compiled with
// ((major<<16)|(minor<<8)|micro, slurm/slurm_version.h). Slurm's loader
// refuses a plugin whose major.minor differs from its own ("Incompatible
// Slurm plugin ... version"), so this is what decides whether it loads.
// The symbol's value is read from the file, not by loading it: loading a
// plugin of another release would run its constructors in llmgw.
func pluginVersion(path string) (slurm.Version, error) {
	f, err := elf.Open(path)
	if err != nil {
		return slurm.Version{}, err
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		return slurm.Version{}, fmt.Errorf("%s: no dynamic symbols (%w); is it a Slurm plugin?", path, err)
	}
	for _, s := range syms {
		if s.Name != "plugin_version" {
			continue
		}
		if s.Section == elf.SHN_UNDEF || int(s.Section) >= len(f.Sections) || s.Size < 4 {
			return slurm.Version{}, fmt.Errorf("%s: plugin_version is not defined in it", path)
		}
		sec := f.Sections[s.Section]
		if sec.Type == elf.SHT_NOBITS || s.Value < sec.Addr || s.Value+4 > sec.Addr+sec.Size {
			return slurm.Version{}, fmt.Errorf("%s: plugin_version lies outside its section %s", path, sec.Name)
		}
		b := make([]byte, 4)
		if _, err := sec.ReadAt(b, int64(s.Value-sec.Addr)); err != nil && !errors.Is(err, io.EOF) {
			return slurm.Version{}, fmt.Errorf("%s: reading plugin_version: %w", path, err)
		}
		n := f.ByteOrder.Uint32(b)
		return slurm.Version{Major: int(n >> 16 & 0xff), Minor: int(n >> 8 & 0xff), Micro: int(n & 0xff)}, nil
	}
	return slurm.Version{}, fmt.Errorf("%s has no plugin_version symbol; is it a Slurm plugin?", path)
}

// spankRelease checks that the plugin at path was built for the Slurm that
// runs here. A zero running version (scontrol --version failed) checks
// nothing; gatherSlurm has said why.
func spankRelease(path, file string, required bool, running slurm.Version) *Finding {
	if running == (slurm.Version{}) {
		return nil
	}
	built, err := pluginVersion(path)
	what := "sbatch, srun and salloc print \"Incompatible Slurm plugin\" and refuse --llmgw-model"
	if required {
		what = "it is required, so every sbatch, srun and salloc fails and slurmd does not start"
	}
	fix := fmt.Sprintf("rebuild it against Slurm %s's headers and install it: make spank SLURM=PREFIX (PREFIX holding include/slurm/spank.h of %s, /usr for Debian's libslurm-dev) && install -m 0644 bin/llmgw_spank.so %s; or on Debian install the package built for it: apt-get install llmgw-spank-slurm%s",
		running.Release(), running.Release(), path, running.Release())
	switch {
	case err != nil:
		return &Finding{Check: "SPANK plugin", Severity: Error,
			Message: fmt.Sprintf("cannot tell which Slurm %s (in %s) was built for: %v; Slurm loads it only if it was built for %s", path, file, err, running.Release()),
			Fix:     fix}
	case built.Release() != running.Release():
		return &Finding{Check: "SPANK plugin", Severity: Error,
			Message: fmt.Sprintf("%s (in %s) was built for Slurm %s, but this host runs %s: Slurm does not load it; %s", path, file, built, running, what),
			Fix:     fix}
	}
	return nil
}
