package catalog

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPolicyApply(t *testing.T) {
	minus2 := time.FixedZone("UTC-2", -2*3600)
	tests := []policyCase{
		{
			name:   "last",
			times:  []string{"2024-03-01T10:00:00Z", "2024-03-01T11:00:00Z", "2024-03-01T12:00:00Z", "2024-03-01T13:00:00Z", "2024-03-01T14:00:00Z"},
			policy: Policy{Last: 3},
			want:   map[string]string{"s4": "last", "s3": "last", "s2": "last"},
		},
		{
			name:   "daily keeps the newest of each day",
			times:  []string{"2024-03-01T10:00:00Z", "2024-03-01T12:00:00Z", "2024-03-02T09:00:00Z", "2024-03-02T18:00:00Z", "2024-03-03T08:00:00Z"},
			policy: Policy{Daily: 2},
			want:   map[string]string{"s4": "daily", "s3": "daily"},
		},
		{
			name:   "counts left over keep the oldest",
			times:  []string{"2024-03-01T10:00:00Z", "2024-03-01T12:00:00Z", "2024-03-02T09:00:00Z", "2024-03-02T18:00:00Z", "2024-03-03T08:00:00Z"},
			policy: Policy{Daily: 5},
			want:   map[string]string{"s4": "daily", "s3": "daily", "s1": "daily", "s0": "daily"},
		},
		{
			name:   "hourly",
			times:  []string{"2024-03-01T10:05:00Z", "2024-03-01T10:50:00Z", "2024-03-01T11:10:00Z", "2024-03-01T12:00:00Z"},
			policy: Policy{Hourly: 2},
			want:   map[string]string{"s3": "hourly", "s2": "hourly"},
		},
		{
			name: "weekly by ISO week across a year",
			// 2020-12-31 and 2021-01-01 are both in 2020-W53.
			times:  []string{"2020-12-31T12:00:00Z", "2021-01-01T12:00:00Z", "2021-01-04T12:00:00Z"},
			policy: Policy{Weekly: 2},
			want:   map[string]string{"s2": "weekly", "s1": "weekly"},
		},
		{
			name:   "monthly and yearly",
			times:  []string{"2022-06-01T00:00:00Z", "2023-01-10T00:00:00Z", "2023-01-20T00:00:00Z", "2023-02-01T00:00:00Z"},
			policy: Policy{Monthly: 2, Yearly: 2},
			want:   map[string]string{"s3": "monthly,yearly", "s2": "monthly", "s0": "yearly"},
		},
		{
			name:   "within is relative to the newest snapshot, bounds included",
			times:  []string{"2024-03-01T09:59:59Z", "2024-03-01T10:00:00Z", "2024-03-01T11:00:00Z", "2024-03-01T12:00:00Z"},
			policy: Policy{Within: 2 * time.Hour},
			want:   map[string]string{"s3": "within 2h0m0s", "s2": "within 2h0m0s", "s1": "within 2h0m0s"},
		},
		{
			name:   "rules add up",
			times:  []string{"2024-03-01T10:00:00Z", "2024-03-02T10:00:00Z", "2024-03-02T11:00:00Z"},
			policy: Policy{Last: 1, Daily: 2},
			want:   map[string]string{"s2": "last,daily", "s0": "daily"},
		},
		{
			name:   "-1 keeps every bucket",
			times:  []string{"2024-03-01T10:00:00Z", "2024-03-02T10:00:00Z", "2024-03-02T11:00:00Z", "2024-03-05T11:00:00Z"},
			policy: Policy{Daily: -1},
			want:   map[string]string{"s3": "daily", "s2": "daily", "s0": "daily"},
		},
		{
			name: "days are the location's",
			// 23:30Z and 00:30Z the next day are one day at UTC-2.
			times:  []string{"2024-03-01T23:30:00Z", "2024-03-02T00:30:00Z"},
			policy: Policy{Daily: 1},
			loc:    minus2,
			want:   map[string]string{"s1": "daily"},
		},
		{
			name:   "equal times order by id",
			times:  []string{"2024-03-01T10:00:00Z", "2024-03-01T10:00:00Z"},
			policy: Policy{Last: 1},
			want:   map[string]string{"s1": "last"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkPolicyApply(t, tt) })
	}
}

// policyCase is a policy applied to snapshots taken at times.
type policyCase struct {
	name   string
	times  []string // RFC 3339, any order; ids are s0, s1, …
	policy Policy
	loc    *time.Location
	want   map[string]string // kept id → reasons, comma-joined
}

// checkPolicyApply applies tt's policy and requires a decision for every
// snapshot, newest first, keeping exactly tt.want for its reasons.
func checkPolicyApply(t *testing.T, tt policyCase) {
	var cands []Candidate
	for i, s := range tt.times {
		tm, err := time.Parse(time.RFC3339, s)
		require.NoError(t, err)
		cands = append(cands, Candidate{ID: fmt.Sprintf("s%d", i), Time: tm})
	}
	loc := tt.loc
	if loc == nil {
		loc = time.UTC
	}
	ds := tt.policy.Apply(cands, loc)
	require.Len(t, ds, len(cands))
	got := map[string]string{}
	for i, d := range ds {
		if i > 0 {
			assert.False(t, d.Time.After(ds[i-1].Time), "decisions newest first")
		}
		assert.Equal(t, d.Keep, len(d.Reasons) > 0, d.ID)
		if d.Keep {
			r := ""
			for j, x := range d.Reasons {
				if j > 0 {
					r += ","
				}
				r += x
			}
			got[d.ID] = r
		}
	}
	assert.Equal(t, tt.want, got)
}

func TestPolicyValidate(t *testing.T) {
	assert.True(t, Policy{}.Empty())
	assert.False(t, Policy{Within: time.Hour}.Empty())
	assert.Error(t, Policy{Last: -2}.Validate())
	assert.Error(t, Policy{Within: -time.Second}.Validate())
	assert.NoError(t, Policy{Daily: -1, Last: 3}.Validate())
	assert.Equal(t, "--keep-last 3 --keep-within 1h0m0s --keep-daily 7", Policy{Last: 3, Within: time.Hour, Daily: 7}.String())
}
