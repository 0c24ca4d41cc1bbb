package mockmessages

import (
	"encoding/json"
	"testing"
)

func TestDefaultReply(t *testing.T) {
	bash := []any{map[string]any{"name": "Read"}, map[string]any{"name": "Bash"}}
	user := func(content any) map[string]any { return map[string]any{"role": "user", "content": content} }
	tests := []struct {
		name string
		body map[string]any
		want Reply
	}{
		{"text", map[string]any{"messages": []any{user("hi")}, "tools": bash}, Reply{Text: "mock reply 3"}},
		{"directive", map[string]any{"messages": []any{user("do\nmock-bash: echo x > f")}, "tools": bash},
			Reply{Tool: "Bash", Input: map[string]any{"command": "echo x > f"}}},
		{"directive in a block before a system message", map[string]any{"messages": []any{
			user([]any{map[string]any{"type": "text", "text": "mock-bash: true"}}),
			map[string]any{"role": "system", "content": "env"},
		}, "tools": []any{map[string]any{"name": "bash"}}}, Reply{Tool: "bash", Input: map[string]any{"command": "true"}}},
		{"no bash tool", map[string]any{"messages": []any{user("mock-bash: true")}}, Reply{Text: "mock reply 3"}},
		{"tool result", map[string]any{"messages": []any{
			user("mock-bash: true"),
			map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use"}}},
			user([]any{map[string]any{"type": "tool_result", "content": "ok"}}),
		}, "tools": bash}, Reply{Text: "mock reply 3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := json.Marshal(DefaultReply(3, tt.body))
			want, _ := json.Marshal(tt.want)
			if string(got) != string(want) {
				t.Errorf("got %s, want %s", got, want)
			}
		})
	}
}
