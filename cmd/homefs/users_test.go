package main

import (
	"errors"
	"os/user"
	"slices"
	"testing"
)

func TestLookupUsers(t *testing.T) {
	u, err := lookupUser("root")
	if err != nil || u.Uid != "0" || u.Gid != "0" || u.HomeDir == "" {
		t.Fatalf("lookupUser(root) = %+v, %v", u, err)
	}
	if u, err := lookupUserID("0"); err != nil || u.Username != "root" {
		t.Fatalf("lookupUserID(0) = %+v, %v", u, err)
	}
	if g, err := lookupGroup("root"); err != nil || g.Gid != "0" {
		t.Fatalf("lookupGroup(root) = %+v, %v", g, err)
	}
	if ids, err := groupIDs(u); err != nil || !slices.Contains(ids, "0") {
		t.Fatalf("groupIDs(root) = %v, %v", ids, err)
	}
	if _, err := lookupUser("homefs-no-such-user"); !errors.As(err, new(user.UnknownUserError)) {
		t.Fatalf("lookupUser of an unknown user: %v, want UnknownUserError", err)
	}
	if _, err := lookupGroup("homefs-no-such-group"); !errors.As(err, new(user.UnknownGroupError)) {
		t.Fatalf("lookupGroup of an unknown group: %v, want UnknownGroupError", err)
	}
	if _, err := lookupUserID("4000000000"); !errors.As(err, new(user.UnknownUserIdError)) {
		t.Fatalf("lookupUserID of an unknown uid: %v, want UnknownUserIdError", err)
	}
}
