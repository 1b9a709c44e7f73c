package scan

import "strings"

// The Hugging Face hub cache is what vLLM, transformers and
// huggingface-cli leave behind when they download a model themselves:
//
//	hub/models--Qwen--Qwen2.5-7B-Instruct/
//	    blobs/<sha256 or git hash>         the file contents
//	    refs/main                          the commit "main" pointed at
//	    snapshots/<commit>/config.json  -> ../../blobs/<hash>
//	    snapshots/<commit>/model-00001-of-00004.safetensors -> ...
//
// Recognising it means weights an engine fetched on its own count as present,
// under the id the engine would be given again ("Qwen/Qwen2.5-7B-Instruct")
// and at the exact revision, rather than as an anonymous directory whose
// size counts every old revision's blobs.

// hfModelPrefix starts a model's directory in the hub cache.
const hfModelPrefix = "models--"

// hfModelID returns the repo id a hub cache directory name stands for:
// "models--org--name" is "org/name", "models--gpt2" is "gpt2". It inverts
// huggingface_hub's repo_folder_name, which joins with "--"; the hub forbids
// "--" inside names, so the inversion is exact.
func hfModelID(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, hfModelPrefix)
	if !ok || rest == "" {
		return "", false
	}
	id := strings.ReplaceAll(rest, "--", "/")
	for _, part := range strings.Split(id, "/") {
		if part == "" || part == "." || part == ".." {
			return "", false
		}
	}
	if strings.Count(id, "/") > 1 {
		return "", false
	}
	return id, true
}

// hfOtherCache reports whether a name is a hub cache directory of a
// kind that is not a model (datasets, spaces). Their parquet and pickles are
// not weights, even where a file happens to end in .bin.
func hfOtherCache(name string) bool {
	return strings.HasPrefix(name, "datasets--") || strings.HasPrefix(name, "spaces--")
}
