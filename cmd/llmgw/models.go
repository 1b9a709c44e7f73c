package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/llmgw/llmgw/api"
	"github.com/llmgw/llmgw/api/munge"
	"github.com/llmgw/llmgw/api/table"
	"github.com/llmgw/llmgw/weights/catalog"
)

const modelsAbout = `Shows and changes the coordinator's model catalog.

  llmgw models add NAME SOURCE [SOURCE...] [--size BYTES] [--sha256 HEX]... [--gpu-memory BYTES]
  llmgw models add NAME hf:ORG/REPO[@REV] [--include GLOB]... [--exclude GLOB]... [--gpu-memory BYTES]
  llmgw models rm NAME
  llmgw models mv OLD NEW
  llmgw models repin NAME
  llmgw models list [--json]

NAME may hold only letters, digits, '.', '_' and '-', at most 64 characters:
what a Slurm feature name can carry in a job's --constraint or --prefer.
SOURCE is an absolute path (checked on each node, never fetched),
hf:org/repo[@rev]/file or an http(s) URL (fetched into each node's cache),
or a bare model id such as Qwen/Qwen2.5-7B-Instruct (left to the engine).
add replaces an entry of the same name. mv renames an entry in one step:
its sources, pins and the nodes that hold it follow it, and no node ever
sees its files unwanted (rm then add leaves a moment in which gc may
collect them); jobs asking for OLD no longer resolve once it has moved. BYTES take an optional unit: 14G, 14GB (decimal) or 13GiB.
Several SOURCEs make one model of several fetched files (hf: or http(s)), such
as the parts of a split GGUF or a safetensors checkpoint with its config and
tokenizer files: each node fetches them into one directory of its cache, under
their own file names, and holds the model only when every file is there. The
job's LLMGW_MODEL_PATH is the first file when it is a .gguf (llama.cpp opens a
split model by its first part), else the directory. Give --sha256 once per
SOURCE, in the same order, or not at all.
hf:ORG/REPO[@REV] is a Hugging Face repository: REV (default main) is resolved
to its commit once, here, through the Hub's API (HF_ENDPOINT names a mirror;
HF_TOKEN, or the file huggingface-cli login writes, a token for a gated
repository), and the model is that commit's files an engine loads: the
safetensors shards its index names (or model.safetensors), the index,
config.json, generation_config.json, tokenizer and chat-template files and
*.py; not original/, not .bin/.pt/.pth beside safetensors, no GGUF.
--include GLOB adds the files it matches, --exclude GLOB takes them away
(globs as huggingface-cli's: '*' matches '/' too). add prints the selection.
Each node fetches those files at that commit into its Hugging Face cache
(agent.toml's hf_cache), in huggingface_hub's own layout, and a job of the
model gets HF_HUB_CACHE and HF_HUB_OFFLINE=1: 'vllm serve ORG/REPO' finds
them by the id, offline. Several hf: files of one repository are such a model
too, of exactly those files, at the first file's commit; files of another
commit or repository fail the add. repin resolves the revision again and
makes its commit a new revision of the model (only changed files are
fetched; a job already running keeps its snapshot); nothing changes when
the commit is the same.
A fetched source added without --sha256 is pinned to the bytes of its first
verified fetch: every later fetch on every node verifies against that digest,
and when the origin serves other bytes, fetches fail until an admin runs
repin, which forgets the pin so that the next verified fetch pins again.
list shows in DIGEST whether a model's sha256 is declared or pinned, and for a
pin how the origin named the version it served (its ETag, or the hub's commit).
Changes need an admin: with munge, root, SlurmUser or a user the coordinator
names in admin_users/admin_groups; else the admin token (--token-file or
LLMGW_TOKEN_FILE).`

// coordFlags adds the flags every coordinator client takes.
func coordFlags(fs *pflag.FlagSet) (url, tokenFile *string) {
	url = fs.String("coordinator", "", "coordinator base URL, e.g. http://coord:8420 (env LLMGW_COORDINATOR)")
	tokenFile = fs.String("token-file", "", "file holding the bearer token (env LLMGW_TOKEN_FILE)")
	// Registering resets it: each command run starts without a CA.
	fs.StringVar(&coordTLSCA, "tls-ca", "", "PEM file of the CA that signed the coordinator's TLS certificate (env "+api.TLSCAEnv+")")
	return url, tokenFile
}

// coordTLSCA is the --tls-ca of the command being run; coordClient passes
// it on (empty: the client reads LLMGW_TLS_CA itself).
var coordTLSCA string

// coordClient builds the API client from those flags.
func coordClient(e *env, url, tokenFile string) (*api.Client, error) {
	if url == "" {
		return nil, usagef("Pass --coordinator URL or set LLMGW_COORDINATOR, e.g. http://127.0.0.1:8420", "no coordinator given")
	}
	c := &api.Client{BaseURL: url, TLSCA: coordTLSCA, UserAgent: "llmgw/" + version}
	if tokenFile == "" {
		// Without a token, the host's munged says who the user is: a
		// coordinator with munge_socket set needs nothing else.
		if sock := mungeSocket(e.getenv); sock != "" {
			c.Auth = munge.Authenticator{Codec: munge.New(sock)}
		}
	}
	if tokenFile != "" {
		tok, err := api.ReadToken(tokenFile)
		if err != nil {
			return nil, err
		}
		c.Token = tok
	}
	return c, nil
}

func modelsCmd(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "models", lookup("models").synopsis, modelsAbout)
	url, tokenFile := coordFlags(fs)
	size := fs.String("size", "", "add: the model's size in bytes, for 'a job fetches N GB' and disk checks")
	sha := fs.StringArray("sha256", nil, "add: the file's sha256, checked after a fetch; once per SOURCE for several")
	gpu := fs.String("gpu-memory", "", "add: GPU memory the model needs, in bytes")
	include := fs.StringArray("include", nil, "add hf:ORG/REPO: also take the repository's files this glob matches")
	exclude := fs.StringArray("exclude", nil, "add hf:ORG/REPO: leave out the files this glob matches")
	asJSON := fs.Bool("json", false, "list: print the catalog as JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := applyEnv(fs, e.getenv); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return usagef("Try 'llmgw models list'", "models needs a subcommand: add, rm, repin or list")
	}
	sub, rest := rest[0], rest[1:]
	if sub != "add" && (fs.Changed("size") || fs.Changed("sha256") || fs.Changed("gpu-memory") || fs.Changed("include") || fs.Changed("exclude")) {
		return usagef("Use them with 'llmgw models add'", "--size, --sha256, --gpu-memory, --include and --exclude apply only to add")
	}
	if sub != "list" && *asJSON {
		return usagef("Use it with 'llmgw models list'", "--json applies only to list")
	}
	var m api.Model
	var hubAdd *hubRequest
	switch sub {
	case "add":
		if len(rest) < 2 {
			return usagef("Try 'llmgw models add llama /models/llama-3-8b.gguf --size 8G'", "models add takes NAME SOURCE [SOURCE...], got %d arguments", len(rest))
		}
		var err error
		if hubAdd, err = hubToAdd(rest[1:], *include, *exclude, *sha); err != nil {
			return err
		}
		if hubAdd == nil {
			if m, err = modelToAdd(rest[0], rest[1:], *sha); err != nil {
				return err
			}
		}
		m.Name = rest[0]
		if m.Size, err = parseBytes("--size", *size); err != nil {
			return err
		}
		if m.GPUMemory, err = parseBytes("--gpu-memory", *gpu); err != nil {
			return err
		}
		if err := catalog.ValidModelName(m.Name); err != nil {
			return usagef("", "%v", err)
		}
	case "mv":
		if len(rest) != 2 {
			return usagef("Try 'llmgw models mv llama-3 llama-3-8b'", "models mv takes OLD NEW, got %d arguments", len(rest))
		}
		if err := catalog.ValidModelName(rest[1]); err != nil {
			return usagef("", "%v", err)
		}
	case "rm", "repin":
		if len(rest) != 1 {
			return usagef("Try 'llmgw models "+sub+" llama'", "models %s takes one NAME, got %d arguments", sub, len(rest))
		}
	case "list":
		if len(rest) != 0 {
			return usagef("Try 'llmgw models list'", "models list takes no arguments, got %q", rest)
		}
	default:
		return usagef("Use add, rm, mv, repin or list", "unknown models subcommand %q", sub)
	}
	c, err := coordClient(e, *url, *tokenFile)
	if err != nil {
		return err
	}
	switch sub {
	case "add":
		if hubAdd != nil {
			return addHub(ctx, e, c, m, *hubAdd)
		}
		got, err := c.PutModel(ctx, m)
		if err != nil {
			return err
		}
		if got.IsSet() {
			fmt.Fprintf(e.stdout, "%s -> %d files, fetched together into one directory:\n", got.Name, len(got.Files))
			for _, f := range got.Files {
				fmt.Fprintf(e.stdout, "  %s\n", f.Source)
			}
			return nil
		}
		fmt.Fprintf(e.stdout, "%s -> %s\n", got.Name, got.Source)
	case "rm":
		if err := c.DeleteModel(ctx, rest[0]); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "removed %s\n", rest[0])
	case "mv":
		got, err := c.RenameModel(ctx, rest[0], rest[1])
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "%s -> %s (was %s)\n", got.Name, got.Source, rest[0])
	case "repin":
		// What is forgotten, said once more: the digest and how the
		// origin named it are gone from the coordinator after this.
		was := ""
		if models, err := c.Models(ctx); err == nil {
			for _, m := range models {
				if m.Name == rest[0] && m.IsHub() {
					return repinHub(ctx, e, c, m)
				}
				if m.Name == rest[0] && m.Pinned != "" {
					was = " (was sha256 " + m.Pinned
					if m.PinnedETag != "" {
						was += ", served as " + api.StripControl(m.PinnedETag)
					}
					was += ")"
				}
			}
		}
		if err := c.Repin(ctx, rest[0]); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "%s: pin forgotten%s; the next verified fetch pins the bytes the origin serves then\n", rest[0], was)
	case "list":
		models, err := c.Models(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(api.Models{Models: models})
		}
		return table.WriteModels(e.stdout, models)
	}
	return nil
}

// modelToAdd is the catalog entry `models add NAME SOURCE...` asks for:
// one source as it always was, or several as a model of several files
// (weights/catalog/set.go), each with the --sha256 in its place.
func modelToAdd(name string, sources, sums []string) (api.Model, error) {
	if len(sources) == 1 {
		if len(sums) > 1 {
			return api.Model{}, usagef("Give one --sha256 for one SOURCE", "%d --sha256 for one source", len(sums))
		}
		m := api.Model{Name: name, Source: sources[0]}
		if len(sums) == 1 {
			m.SHA256 = sums[0]
		}
		return m, nil
	}
	if len(sums) != 0 && len(sums) != len(sources) {
		return api.Model{}, usagef("Give --sha256 once per SOURCE, in the same order, or not at all",
			"%d sources but %d --sha256", len(sources), len(sums))
	}
	m := api.Model{Name: name, Source: sources[0], Files: make([]api.File, len(sources))}
	for i, src := range sources {
		m.Files[i].Source = src
		if len(sums) > 0 {
			m.Files[i].SHA256 = sums[i]
		}
	}
	if err := catalog.CheckSet(m); err != nil {
		return api.Model{}, usagef("", "model %s: %v", name, err)
	}
	return m, nil
}

// parseBytes is catalog.ParseBytes with a bad value made a usage error.
func parseBytes(flag, s string) (int64, error) {
	n, err := catalog.ParseBytes(s)
	if err != nil {
		return 0, usagef("Give bytes, e.g. 14000000000, 14G or 13GiB", "%s %v", flag, err)
	}
	return n, nil
}
