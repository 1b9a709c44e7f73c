// Command hub serves the Hub stand-in (weights/hub/hubtest) for
// scripts/bench/hub.sh: one repository, org/big, of --files files at main
// (a sharded checkpoint whose index names --files minus ten shards, the
// configs, tokenizer and chat template an engine loads, and three files
// no engine loads), and a control address the script asks how many bytes
// the Hub served, and has it push a commit that changes one file.
//
//	GET  CONTROL/served            bytes of file contents served so far
//	POST CONTROL/commit?change=P   a new commit on main with file P changed; prints its size
package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
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
	flag.Parse()
	if *files < 12 {
		log.Fatal("--files: at least 12")
	}
	h, err := hubtest.Start()
	if err != nil {
		log.Fatal(err)
	}
	h.PageSize = 1000 // the Hub's own tree pages are of a thousand entries
	if *from != "" {
		if _, err := h.CommitDir(*repoID, "main", *from); err != nil {
			log.Fatal(err)
		}
		serve(h, *repoID, *addrFile)
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
	serve(h, *repoID, *addrFile)
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
func serve(h *hubtest.Hub, repoID, addrFile string) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /served", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, h.Served()) })
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
