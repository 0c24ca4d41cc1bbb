package catalog

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Policy says which snapshots of a session to keep, in restic's terms.
// A count of -1 keeps every snapshot the rule applies to; 0 turns the rule
// off. A snapshot is kept when any rule keeps it.
type Policy struct {
	// Last keeps the Last newest snapshots.
	Last int `json:"last,omitempty"`
	// Within keeps every snapshot taken within this duration of the
	// newest one (not of now: an idle session keeps its last stretch).
	Within time.Duration `json:"within,omitempty"`
	// Hourly, Daily, Weekly, Monthly and Yearly keep the newest snapshot
	// of each of the last N hours, days, ISO weeks, months and years that
	// have snapshots; a rule with count left over when it reaches the
	// oldest snapshot keeps that one too, so the history kept is as long
	// as the counts allow.
	Hourly  int `json:"hourly,omitempty"`
	Daily   int `json:"daily,omitempty"`
	Weekly  int `json:"weekly,omitempty"`
	Monthly int `json:"monthly,omitempty"`
	Yearly  int `json:"yearly,omitempty"`
}

// Empty reports whether p keeps nothing by itself (no rule is set), which
// would forget every snapshot: callers refuse it.
func (p Policy) Empty() bool {
	return p.Last == 0 && p.Within == 0 && p.Hourly == 0 && p.Daily == 0 &&
		p.Weekly == 0 && p.Monthly == 0 && p.Yearly == 0
}

// Validate rejects counts below -1 and negative durations.
func (p Policy) Validate() error {
	for _, r := range []struct {
		name string
		n    int
	}{{"last", p.Last}, {"hourly", p.Hourly}, {"daily", p.Daily}, {"weekly", p.Weekly}, {"monthly", p.Monthly}, {"yearly", p.Yearly}} {
		if r.n < -1 {
			return fmt.Errorf("catalog: policy: keep-%s %d: want a count, or -1 for all", r.name, r.n)
		}
	}
	if p.Within < 0 {
		return fmt.Errorf("catalog: policy: keep-within %s: want a positive duration", p.Within)
	}
	return nil
}

// String is the policy as forget's flags.
func (p Policy) String() string {
	var parts []string
	add := func(name string, n int) {
		if n != 0 {
			parts = append(parts, fmt.Sprintf("--keep-%s %d", name, n))
		}
	}
	add("last", p.Last)
	if p.Within != 0 {
		parts = append(parts, "--keep-within "+p.Within.String())
	}
	add("hourly", p.Hourly)
	add("daily", p.Daily)
	add("weekly", p.Weekly)
	add("monthly", p.Monthly)
	add("yearly", p.Yearly)
	return strings.Join(parts, " ")
}

// Candidate is a snapshot a policy decides on.
type Candidate struct {
	ID   string
	Time time.Time
}

// Decision is a policy's verdict on one snapshot.
type Decision struct {
	ID   string    `json:"id"`
	Time time.Time `json:"time"`
	Keep bool      `json:"keep"`
	// Reasons are the rules that keep it ("last", "daily", "within 24h0m0s",
	// "head of session a", "mounted at /mnt"); empty when it goes.
	Reasons []string `json:"reasons,omitempty"`
}

// Apply decides on snaps (in any order) and returns the decisions newest
// first (ties by id). Buckets (hour, day, ISO week, month, year) are those
// of each snapshot's time in loc.
func (p Policy) Apply(snaps []Candidate, loc *time.Location) []Decision {
	list := slices.Clone(snaps)
	slices.SortFunc(list, func(a, b Candidate) int {
		if c := b.Time.Compare(a.Time); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	type bucket struct {
		reason string
		count  int
		of     func(t time.Time, nr int) int
		last   int
	}
	buckets := []*bucket{
		{"last", p.Last, func(_ time.Time, nr int) int { return nr }, -1},
		{"hourly", p.Hourly, func(t time.Time, _ int) int {
			return t.Year()*1_000_000 + int(t.Month())*10_000 + t.Day()*100 + t.Hour()
		}, -1},
		{"daily", p.Daily, func(t time.Time, _ int) int { return t.Year()*10_000 + int(t.Month())*100 + t.Day() }, -1},
		{"weekly", p.Weekly, func(t time.Time, _ int) int { y, w := t.ISOWeek(); return y*100 + w }, -1},
		{"monthly", p.Monthly, func(t time.Time, _ int) int { return t.Year()*100 + int(t.Month()) }, -1},
		{"yearly", p.Yearly, func(t time.Time, _ int) int { return t.Year() }, -1},
	}
	out := make([]Decision, 0, len(list))
	for nr, s := range list {
		t := s.Time.In(loc)
		d := Decision{ID: s.ID, Time: s.Time}
		for _, b := range buckets {
			if b.count == 0 {
				continue
			}
			v := b.of(t, nr)
			if v != b.last || nr == len(list)-1 {
				b.last = v
				if b.count > 0 {
					b.count--
				}
				d.Reasons = append(d.Reasons, b.reason)
			}
		}
		if p.Within > 0 && !s.Time.Before(list[0].Time.Add(-p.Within)) {
			d.Reasons = append(d.Reasons, "within "+p.Within.String())
		}
		d.Keep = len(d.Reasons) > 0
		out = append(out, d)
	}
	return out
}
