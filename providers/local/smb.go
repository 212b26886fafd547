package local

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/hirochachacha/go-smb2"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// SMBCheck is the smb_check step type: a file server's health as its
// clients see it, the shares it lists over SMB2.
const SMBCheck = "smb_check"

type smbAttrs struct {
	Address  string   `cty:"address" required:"true" doc:"The SMB server: a host or address, with :PORT when not 445."`
	Shares   []string `cty:"shares" required:"true" doc:"The share names the server must list (compared without case, as SMB does)."`
	User     string   `cty:"user" doc:"The account to list the shares as, \"guest\" by default (a server that maps unknown users to its guest account, Samba's map to guest = Bad User). Such a server lets a name it has no account of in as its guest: to prove the account, name a share guests may not open in share."`
	Password string   `cty:"password" sensitive:"true" doc:"The account's password; none by default."`
	Domain   string   `cty:"domain" doc:"The account's domain or workgroup; none by default."`
	Share    string   `cty:"share" doc:"A share to open as the account and list the top of (a tree connect, as a client mounting it does): the check passes only once the account may read it. None by default."`
	Timeout  string   `cty:"timeout" doc:"How long to keep trying, \"60s\" by default."`
	Interval string   `cty:"interval" doc:"The pause between tries, \"2s\" by default."`
}

type smbOutputs struct {
	Shares []string `cty:"shares"`
}

var smbStep = &sdk.StepType[*Provider, smbAttrs, none, none]{
	Name:        SMBCheck,
	Description: "Waits until an SMB server lists the shares named (SMB2 or 3, NTLM authentication, the share list of IPC$ as smbclient -L asks it) and, with share, lets the account open that share and read its top; when it gives up, the error names the last answer.",
	Rollback:    "Nothing to undo.",
	Outputs:     smbOutputs{},
	CanCheck:    true,
	WaitsOnly:   true,
	Unknowns:    true,
	Validate: func(c *call, a *smbAttrs) phases.Diagnostics {
		_, d := decodeSMB(c, *a)
		return d
	},
	Plan:  planSMB,
	Apply: applySMB,
}

// smbCheck is an smb_check step with its defaults applied.
type smbCheck struct {
	address           string // host:port
	shares            []string
	user, domain      string
	password          string
	share             string // "": none opened
	timeout, interval time.Duration
	timeoutText       string
	intervalText      string
}

func decodeSMB(c *call, a smbAttrs) (smbCheck, phases.Diagnostics) {
	s := smbCheck{address: a.Address, shares: a.Shares, user: orElse(a.User, "guest"), domain: a.Domain, password: a.Password, share: a.Share, timeoutText: "60s", intervalText: "2s"}
	var d phases.Diagnostics
	if !c.Unknown("address") {
		if _, _, err := net.SplitHostPort(a.Address); err != nil {
			s.address = net.JoinHostPort(a.Address, "445")
		}
		if host, _, err := net.SplitHostPort(s.address); err != nil || host == "" || strings.ContainsAny(host, "/\\") {
			d = append(d, invalid("The \"address\" attribute of %s must be a host or an address, with :PORT when not 445, not %q.", c.Addr, a.Address)...)
		}
	}
	if !c.Unknown("shares") && len(a.Shares) == 0 {
		d = append(d, invalid("The \"shares\" attribute of %s is empty: name the shares the server must list.", c.Addr)...)
	}
	if !c.Unknown("share") && strings.ContainsAny(a.Share, "/\\") {
		d = append(d, invalid("The \"share\" attribute of %s must be a share's name (e.g. \"media\"), not the path %q.", c.Addr, a.Share)...)
	}
	for _, x := range []struct {
		name, value string
		text        *string
		dur         *time.Duration
	}{{"timeout", a.Timeout, &s.timeoutText, &s.timeout}, {"interval", a.Interval, &s.intervalText, &s.interval}} {
		if c.Unknown(x.name) {
			*x.text = sdk.UnknownText
			continue
		}
		if !c.Null(x.name) {
			*x.text = x.value
		}
		dur, dd := duration(c, x.name, *x.text)
		if dd == nil && dur == 0 {
			dd = invalid("The %q attribute of %s must be longer than zero.", x.name, c.Addr)
		}
		d = append(d, dd...)
		*x.dur = dur
	}
	return s, d
}

func orElse(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func planSMB(_ context.Context, c *call, a smbAttrs, _ *sdk.Prior[none, none]) sdk.Plan[none] {
	s, _ := decodeSMB(c, a)
	shares := strings.Join(s.shares, ", ")
	if c.Unknown("shares") {
		shares = sdk.UnknownText
	}
	address := s.address
	if c.Unknown("address") {
		address = sdk.UnknownText
	}
	open := ""
	if c.Unknown("share") {
		open = " and opens " + sdk.UnknownText
	} else if s.share != "" {
		open = " and opens " + s.share
	}
	return sdk.Plan[none]{Diff: fmt.Sprintf("list the SMB shares of %s as %s until it lists %s%s (timeout %s, every %s)", address, s.user, shares, open, s.timeoutText, s.intervalText)}
}

func applySMB(ctx context.Context, c *call, a smbAttrs, _ none, _ *sdk.Prior[none, none]) sdk.Apply[none, none] {
	s, _ := decodeSMB(c, a)
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var last string
	for {
		listed, top, err := listShares(ctx, s, max(s.interval, 10*time.Second))
		missing := missingShares(s.shares, listed)
		if err == nil && len(missing) == 0 {
			c.Log.Printf("%s lists %s", s.address, strings.Join(listed, ", "))
			if s.share != "" {
				c.Log.Printf("%s opened %s as %s: %d entries at its top", s.address, s.share, s.user, top)
			}
			return sdk.Apply[none, none]{Outputs: smbOutputs{listed}, Revert: nothingToUndo()}
		}
		seen := fmt.Sprintf("it lists %s, not %s", orElse(strings.Join(listed, ", "), "no share"), strings.Join(missing, ", "))
		if err != nil {
			seen = "error: " + err.Error()
		}
		if err != nil && ctx.Err() != nil {
			seen = last // cut by our own deadline: not the server's answer
		}
		if seen != last {
			c.Log.Printf("%s: %s: %s", c.Addr, s.address, seen)
			last = seen
		}
		t := time.NewTimer(s.interval)
		select {
		case <-t.C:
			continue
		case <-ctx.Done():
			t.Stop()
		}
		if parent.Err() != nil {
			return sdk.Apply[none, none]{Diagnostics: sdk.Interrupted(c.Addr, context.Cause(parent))}
		}
		answer := "the last answer: " + last
		if last == "" {
			answer = "no try finished in that time"
		}
		return sdk.Apply[none, none]{Diagnostics: phases.Errorf("SMB Check Failed",
			"%s: %s did not list the shares %s%s to %s within %s; %s.", c.Addr, s.address, strings.Join(s.shares, ", "), opening(s.share), s.user, s.timeout, answer)}
	}
}

func opening(share string) string {
	if share == "" {
		return ""
	}
	return " (and open " + share + ")"
}

// listShares connects, authenticates and lists the server's shares once;
// with s.share it opens that share and counts the entries at its top.
func listShares(ctx context.Context, s smbCheck, limit time.Duration) (names []string, top int, err error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", s.address)
	if err != nil {
		return nil, 0, err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline) // the session itself ignores ctx once made
	}
	d := &smb2.Dialer{Initiator: &smb2.NTLMInitiator{User: s.user, Password: s.password, Domain: s.domain}}
	session, err := d.DialContext(ctx, conn)
	if err != nil {
		return nil, 0, fmt.Errorf("session as %s: %w", s.user, err)
	}
	defer func() { _ = session.Logoff() }()
	names, err = session.WithContext(ctx).ListSharenames()
	if err != nil {
		return nil, 0, fmt.Errorf("listing the shares: %w", err)
	}
	slices.SortFunc(names, func(a, b string) int { return strings.Compare(strings.ToLower(a), strings.ToLower(b)) })
	if s.share == "" {
		return names, 0, nil
	}
	top, err = readShareTop(ctx, session, s)
	return names, top, err
}

// readShareTop opens the share (a tree connect) and lists its top.
func readShareTop(ctx context.Context, session *smb2.Session, s smbCheck) (int, error) {
	share, err := session.WithContext(ctx).Mount(s.share)
	if err != nil {
		return 0, fmt.Errorf("opening the share %s as %s: %w", s.share, s.user, err)
	}
	defer func() { _ = share.Umount() }()
	entries, err := share.WithContext(ctx).ReadDir(".")
	if err != nil {
		return 0, fmt.Errorf("reading the share %s as %s: %w", s.share, s.user, err)
	}
	return len(entries), nil
}

// missingShares are the wanted shares not listed, compared without case.
func missingShares(want, listed []string) []string {
	var missing []string
	for _, w := range want {
		if !slices.ContainsFunc(listed, func(l string) bool { return strings.EqualFold(l, w) }) {
			missing = append(missing, w)
		}
	}
	return missing
}
