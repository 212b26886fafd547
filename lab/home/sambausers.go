package home

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// The old Samba's accounts have passwords the lab knows, so the example
// can prove a moved account logs in to the new Samba with its old
// password (smb_check as samba_check_user). They are random once per
// lab directory, kept 0600 in it (a lab restarted on that directory finds
// its VMs seeded with them), and leave it only as the sensitive
// samba_check_password of Env.

// sambaPasswordsFile is the lab directory's file of them, by user.
const sambaPasswordsFile = "samba-passwords.json"

// SambaCheckUser is the moved account the example's smb_check logs in
// as, and SambaCheckShare the share it opens (its valid users name it).
const (
	SambaCheckUser  = "ana"
	SambaCheckShare = "media"
)

// sambaUsers are the old Samba's accounts.
var sambaUsers = []string{"ana", "ben"}

// sambaPasswords are the lab directory's Samba passwords, made the
// first time.
func (h *Home) sambaPasswords() (map[string]string, error) {
	file := filepath.Join(h.dir, sambaPasswordsFile)
	b, err := os.ReadFile(file)
	if err == nil {
		pw := map[string]string{}
		if err := json.Unmarshal(b, &pw); err != nil || pw[SambaCheckUser] == "" {
			return nil, fmt.Errorf("lab: %s is not the lab's Samba passwords (remove it with the lab's directory): %v", file, err)
		}
		return pw, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("lab: %w", err)
	}
	pw := map[string]string{}
	for _, u := range sambaUsers {
		pw[u] = rand.Text()
	}
	b, _ = json.Marshal(pw)
	if err := os.WriteFile(file, b, 0o600); err != nil {
		return nil, fmt.Errorf("lab: %w", err)
	}
	return pw, nil
}

// sambaCheckVars make the example's smb_check log in as a moved account
// with its old password and open its share.
func (h *Home) sambaCheckVars() []string {
	o := h.oldHost
	if o == nil || o.SambaPasswords[SambaCheckUser] == "" {
		return nil
	}
	return []string{
		`MIGRATE_VAR_samba_users=["` + strings.Join(slices.Sorted(maps.Keys(o.SambaPasswords)), `","`) + `"]`,
		"MIGRATE_VAR_samba_check_user=" + SambaCheckUser,
		"MIGRATE_VAR_samba_check_password=" + o.SambaPasswords[SambaCheckUser],
		"MIGRATE_VAR_samba_check_share=" + SambaCheckShare,
	}
}
