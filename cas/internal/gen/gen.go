// Package gen generates deterministic test content for package cas and its
// conformance suite.
package gen

import (
	"bytes"
	"fmt"
	"math/rand/v2"
)

// JSONL returns n bytes of agent-rollout-like JSON lines generated from
// seed: the kind of content homefs mostly stores.
func JSONL(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 0x686f6d656673))
	words := []string{"the", "file", "function", "test", "error", "return", "build", "go", "run",
		"package", "import", "fix", "update", "config", "value", "struct", "method", "check",
		"write", "read", "store", "chunk", "hash", "commit", "branch", "output", "line", "path"}
	text := func(k int) string {
		var b bytes.Buffer
		for i := range k {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(words[rng.IntN(len(words))])
		}
		return b.String()
	}
	var buf bytes.Buffer
	for i := 0; buf.Len() < n; i++ {
		ts := fmt.Sprintf("2025-06-01T12:%02d:%02d.%03dZ", i/60%60, i%60, rng.IntN(1000))
		switch rng.IntN(3) {
		case 0:
			fmt.Fprintf(&buf, `{"timestamp":%q,"type":"response_item","payload":{"type":"message","role":"assistant","content":[{"type":"output_text","text":%q}]}}`+"\n",
				ts, text(40+rng.IntN(60)))
		case 1:
			fmt.Fprintf(&buf, `{"timestamp":%q,"type":"response_item","payload":{"type":"function_call","name":"shell","arguments":%q,"call_id":"call_%016x"}}`+"\n",
				ts, fmt.Sprintf(`{"command":["bash","-lc","go test ./%s/... -run %s"],"workdir":"/work/main"}`, words[rng.IntN(len(words))], text(2)), rng.Uint64())
		default:
			fmt.Fprintf(&buf, `{"timestamp":%q,"type":"response_item","payload":{"type":"function_call_output","call_id":"call_%016x","output":%q}}`+"\n",
				ts, rng.Uint64(), fmt.Sprintf("ok  \thomefs/%s\t%d.%03ds\n%s", words[rng.IntN(len(words))], rng.IntN(10), rng.IntN(1000), text(30+rng.IntN(50))))
		}
	}
	return buf.Bytes()[:n]
}
