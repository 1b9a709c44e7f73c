// Command hub serves the Hub stand-in (weights/hub/hubtest) for
// scripts/bench/hub.sh: one repository, org/big, of --files files at main
// (a sharded checkpoint whose index names --files minus ten shards, the
// configs, tokenizer and chat template an engine loads, and three files
// no engine loads), and a control address the script asks how many bytes
// the Hub served, and has it push a commit that changes one file.
//
// With --twelve SIZE it serves instead, for scripts/bench/fanout.sh --hub,
// a repository of the 12 files an engine loads, SIZE bytes in all, no
// file's size a multiple of a swarm chunk, and writes their sha256sum
// list (--manifest) for the nodes' snapshots to be checked against.
//
//	GET  CONTROL/served            bytes of file contents served so far
//	GET  CONTROL/_clients          bytes served to each client address, "ADDR BYTES" lines
//	POST CONTROL/commit?change=P   a new commit on main with file P changed; prints its size
package main

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/llmgw/llmgw/weights/hub/hubtest"
)

func main() {
	files := flag.Int("files", 200, "files in the repository")
	shard := flag.Int("shard-bytes", 256<<10, "bytes of each safetensors shard")
	addrFile := flag.String("addr-file", "", "write HUB_URL CONTROL_URL here once serving")
	from := flag.String("from", "", "serve this directory's files as --repo instead (a model saved by save_pretrained)")
	repoID := flag.String("repo", "org/big", "the repository's id")
	listen := flag.String("listen", "127.0.0.1", "the address the Hub, its CDN and the control address listen on")
	twelve := flag.Int64("twelve", 0, "serve a repository of 12 files of this many bytes in all instead")
	manifest := flag.String("manifest", "", "with --twelve: write the files' sha256sum list here")
	flag.Parse()
	if *files < 12 {
		log.Fatal("--files: at least 12")
	}
	h, err := hubtest.StartOn(*listen)
	if err != nil {
		log.Fatal(err)
	}
	h.PageSize = 1000 // the Hub's own tree pages are of a thousand entries
	if *from != "" {
		if _, err := h.CommitDir(*repoID, "main", *from); err != nil {
			log.Fatal(err)
		}
		serve(h, *repoID, *listen, *addrFile)
	}
	if *twelve > 0 {
		repo, err := twelveFiles(*twelve)
		if err != nil {
			log.Fatal(err)
		}
		h.Commit(*repoID, "main", repo)
		if *manifest != "" {
			var lines []string
			for p, b := range repo {
				lines = append(lines, fmt.Sprintf("%x  %s", sha256.Sum256(b), p))
			}
			sort.Strings(lines)
			if err := os.WriteFile(*manifest, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
				log.Fatal(err)
			}
		}
		serve(h, *repoID, *listen, *addrFile)
	}
	repo := map[string][]byte{}
	n := *files - 10
	index := map[string]any{"metadata": map[string]any{"total_size": n * *shard}}
	wm := map[string]string{}
	rng := rand.New(rand.NewPCG(25, 25))
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i, n)
		tensor := fmt.Sprintf("layer.%d.weight", i)
		repo[name] = safetensors(tensor, *shard, rng)
		wm[tensor] = name
	}
	index["weight_map"] = wm
	repo["model.safetensors.index.json"], _ = json.Marshal(index)
	for _, name := range []string{"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"} {
		repo[name] = []byte(`{"name":"` + name + `"}`)
	}
	repo["README.md"] = []byte("# big\n")
	repo[".gitattributes"] = []byte("*.safetensors filter=lfs diff=lfs merge=lfs -text\n")
	repo["LICENSE"] = []byte("license\n")
	h.Commit(*repoID, "main", repo)
	serve(h, *repoID, *listen, *addrFile)
}

// twelveFiles is a checkpoint of four shards and its index, configs,
// tokenizer files and chat template, total bytes in all: no file's size a
// multiple of a 16 MiB swarm chunk, so chunks span files all along.
func twelveFiles(total int64) (map[string][]byte, error) {
	rng := rand.New(rand.NewChaCha8([32]byte{25}))
	random := func(n int64) []byte {
		b := make([]byte, n)
		for i := 0; i+8 <= len(b); i += 8 {
			binary.LittleEndian.PutUint64(b[i:], rng.Uint64())
		}
		return b
	}
	text := func(n int) []byte {
		b := random(int64(n))
		for i := range b {
			b[i] = 'a' + b[i]%26
		}
		return b
	}
	repo := map[string][]byte{
		"chat_template.jinja":          []byte("{% for m in messages %}{{ m['content'] }}{% endfor %}"),
		"config.json":                  []byte(`{"model_type":"llama","hidden_size":4096}`),
		"generation_config.json":       []byte(`{"do_sample":false}`),
		"merges.txt":                   text(456789),
		"model.safetensors.index.json": []byte(`{"weight_map":{"a":"model-00001-of-00004.safetensors","b":"model-00002-of-00004.safetensors","c":"model-00003-of-00004.safetensors","d":"model-00004-of-00004.safetensors"}}`),
		"special_tokens_map.json":      []byte(`{"eos_token":"</s>"}`),
		"tokenizer.json":               text(2345678),
		"tokenizer_config.json":        []byte(`{"model_max_length":4096}`),
	}
	var small int64
	for _, b := range repo {
		small += int64(len(b))
	}
	const mib = 1 << 20
	shards := []int64{total/4 - 3*mib + 12345, total/4 + 2*mib + 777, total/4 - mib + 4321}
	last := total - small
	for _, n := range shards {
		last -= n
	}
	shards = append(shards, last)
	for i, n := range shards {
		if n <= 16 || n%(16*mib) == 0 {
			return nil, fmt.Errorf("--twelve %d: shard %d would be %d bytes; give a larger size", total, i+1, n)
		}
		repo[fmt.Sprintf("model-%05d-of-00004.safetensors", i+1)] = safetensors(fmt.Sprintf("layer.%d.weight", i), int(n), rng)
	}
	return repo, nil
}

// safetensors is a safetensors file of size bytes holding one tensor of
// random bytes: a shard the node's scan reads as whole, as it reads a real
// one (its header, and the tensor's end at the file's).
func safetensors(tensor string, size int, rng *rand.Rand) []byte {
	hdr := ""
	for data := size - 8; ; {
		hdr = fmt.Sprintf(`{"%s":{"dtype":"U8","shape":[%d],"data_offsets":[0,%d]}}`, tensor, data, data)
		hdr += strings.Repeat(" ", (8-len(hdr)%8)%8)
		if d := size - 8 - len(hdr); d == data {
			break
		} else {
			data = d
		}
	}
	b := make([]byte, size)
	binary.LittleEndian.PutUint64(b, uint64(len(hdr)))
	copy(b[8:], hdr)
	for j := 8 + len(hdr); j < size; j++ {
		b[j] = byte(rng.Uint32())
	}
	return b
}

// serve answers the control address until killed.
func serve(h *hubtest.Hub, repoID, listen, addrFile string) {
	l, err := net.Listen("tcp", net.JoinHostPort(listen, "0"))
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /served", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, h.Served()) })
	mux.HandleFunc("GET /_clients", func(w http.ResponseWriter, r *http.Request) {
		for addr, n := range h.ServedTo() {
			fmt.Fprintf(w, "%s %d\n", addr, n)
		}
	})
	mux.HandleFunc("POST /commit", func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Query().Get("change")
		files := h.Files(repoID, h.Branch(repoID, "main"))
		b, ok := files[p]
		if !ok {
			http.Error(w, "no such file "+p, http.StatusNotFound)
			return
		}
		files[p] = append(b, []byte(" changed")...)
		h.Commit(repoID, "main", files)
		fmt.Fprintln(w, strconv.Itoa(len(files[p])))
	})
	if addrFile != "" {
		if err := os.WriteFile(addrFile, []byte(h.URL+" http://"+l.Addr().String()+"\n"), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	log.Fatal(http.Serve(l, mux))
}
