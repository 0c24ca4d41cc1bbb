package fusefs

import "testing"

func TestAllowsOther(t *testing.T) {
	for conf, want := range map[string]bool{
		"":                                   false,
		"# user_allow_other\n":               false,
		"mount_max = 1000\nuser_allow_other": true,
		"  user_allow_other  \n":             true,
		"user_allow_others\n":                false,
	} {
		if got := allowsOther([]byte(conf)); got != want {
			t.Errorf("allowsOther(%q) = %v, want %v", conf, got, want)
		}
	}
}
