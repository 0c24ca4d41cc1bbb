package main

import (
	"context"
	"errors"
	"os/exec"
	"os/user"
	"strings"
	"time"
)

// homefs is built without cgo (Makefile: it starts faster without the C
// loader), so os/user reads /etc/passwd and /etc/group itself and knows
// none of the users and groups that NSS adds (LDAP, sssd, systemd's
// dynamic users). What it does not find, the lookups below ask getent(1)
// for, and a user's groups come from id(1), as login would set them
// (initgroups). Built with cgo, os/user asks NSS itself and getent finds
// nothing more.

// nssWait bounds a getent or id call: NSS may ask a directory server.
const nssWait = 10 * time.Second

// lookupUser is user.Lookup, then getent passwd.
func lookupUser(name string) (*user.User, error) {
	u, err := user.Lookup(name)
	if errors.As(err, new(user.UnknownUserError)) {
		if f := getent("passwd", name); len(f) >= 7 {
			return &user.User{Username: f[0], Uid: f[2], Gid: f[3], Name: f[4], HomeDir: f[5]}, nil
		}
	}
	return u, err
}

// lookupUserID is user.LookupId, then getent passwd.
func lookupUserID(uid string) (*user.User, error) {
	u, err := user.LookupId(uid)
	if errors.As(err, new(user.UnknownUserIdError)) {
		if f := getent("passwd", uid); len(f) >= 7 && f[2] == uid {
			return &user.User{Username: f[0], Uid: f[2], Gid: f[3], Name: f[4], HomeDir: f[5]}, nil
		}
	}
	return u, err
}

// lookupGroup is user.LookupGroup, then getent group.
func lookupGroup(name string) (*user.Group, error) {
	g, err := user.LookupGroup(name)
	if errors.As(err, new(user.UnknownGroupError)) {
		if f := getent("group", name); len(f) >= 3 {
			return &user.Group{Name: f[0], Gid: f[2]}, nil
		}
	}
	return g, err
}

// groupIDs is the group ids of u as NSS gives them (id -G), else as
// /etc/group does.
func groupIDs(u *user.User) ([]string, error) {
	if u.Username != "" {
		ctx, cancel := context.WithTimeout(context.Background(), nssWait)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "id", "-G", "--", u.Username).Output(); err == nil {
			if ids := strings.Fields(string(out)); len(ids) > 0 {
				return ids, nil
			}
		}
	}
	return u.GroupIds()
}

// getent returns the fields of key's entry in database, or nil when
// getent has none or cannot run.
func getent(database, key string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), nssWait)
	defer cancel()
	out, err := exec.CommandContext(ctx, "getent", database, "--", key).Output()
	if err != nil {
		return nil
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.Split(line, ":")
}
