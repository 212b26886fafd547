package incus

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers"
	"github.com/homelab-migrate/migrate/providers/incus/incusapi"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

// An imported volume (source_file) is an ISO volume, whose config Incus
// refuses to change after the import: migrate's marks (who imported it,
// the file's SHA-256) go in its description instead, as
// "migrate: imported by ADDR sha256 HEX".
const importMark = "migrate: imported by "

func validateImport(c *call, s *volumeSpec) phases.Diagnostics {
	var diags phases.Diagnostics
	s.ContentType = orDefault(s.ContentType, "iso")
	if s.ContentType != "iso" {
		diags = append(diags, errorf("Invalid Attribute Value", "%s imports source_file as an \"iso\" volume; content_type %q cannot be imported.", c.Addr, s.ContentType)...)
	}
	if s.Size != "" || len(s.Config) > 0 {
		diags = append(diags, errorf("Conflicting Attributes", "%s imports source_file: the volume takes the file's size, and Incus does not allow config keys on an ISO volume; remove size and config.", c.Addr)...)
	}
	if strings.Contains(s.Name, "/") || strings.Contains(s.Pool, "/") {
		diags = append(diags, errorf("Invalid Attribute Value", "The volume %q in pool %q of %s: names may not contain \"/\".", s.Name, s.Pool, c.Addr)...)
	}
	s.path = s.SourceFile
	if !filepath.IsAbs(s.path) {
		s.path = filepath.Join(c.Settings.dir, s.path)
	}
	s.want, s.sens = map[string]string{}, map[string]bool{}
	return diags
}

// fileDigest is the hex SHA-256 of the file and its size.
func fileDigest(c *call, path string) (string, int64, phases.Diagnostics) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, errorf("Cannot Read Source File", "The source_file of %s cannot be read: %v.", c.Addr, err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, errorf("Cannot Read Source File", "The source_file of %s cannot be read: %v.", c.Addr, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// digestVolume adds the imported file's SHA-256 to the step's inputs, so
// that a changed ISO plans an update.
func digestVolume(_ context.Context, c *call, s volumeSpec) (string, phases.Diagnostics) {
	if s.path == "" {
		return "", nil
	}
	sum, _, diags := fileDigest(c, s.path)
	if diags.HasErrors() {
		return "", diags
	}
	return "source_file sha256 " + sum, nil
}

// importMarks reads the marks of a volume's description.
func importMarks(v *incusapi.StorageVolume) (by, sum string) {
	rest, ok := strings.CutPrefix(v.Description, importMark)
	if !ok {
		return "", ""
	}
	by, sum, _ = strings.Cut(rest, " sha256 ")
	return by, sum
}

func readImport(ctx context.Context, c *call, s volumeSpec, prior *sdk.Prior[struct{}, volumeRevert]) sdk.Read[volumeRevert] {
	v, _, err := getVolume(ctx, c, s)
	if err != nil {
		return sdk.Read[volumeRevert]{Diagnostics: apiErr(c, "Cannot Read Volume", err)}
	}
	if v == nil {
		return sdk.Read[volumeRevert]{Observation: providers.Absent, Detail: fmt.Sprintf("volume %q does not exist in pool %q", s.Name, s.Pool)}
	}
	sum, _, diags := fileDigest(c, s.path)
	if diags.HasErrors() {
		return sdk.Read[volumeRevert]{Diagnostics: diags}
	}
	by, have := importMarks(v)
	if v.ContentType != s.ContentType || have != sum {
		return sdk.Read[volumeRevert]{Observation: providers.Drifted, Detail: fmt.Sprintf("volume %q (%s) does not hold source_file %s (sha256 %s): %s", s.Name, v.ContentType, s.SourceFile, short(sum), holds(have))}
	}
	r := sdk.Read[volumeRevert]{Observation: providers.Present, Outputs: volumeOut{s.Pool, s.Name}}
	if prior == nil && by == c.Addr.String() {
		r.Revert = deleteVolume(s)
	}
	return r
}

func short(sum string) string {
	if len(sum) > 12 {
		return sum[:12]
	}
	return sum
}

func holds(sum string) string {
	if sum == "" {
		return "migrate did not import it"
	}
	return "it holds sha256 " + short(sum)
}

// importCheck says what to do with the live volume: import (absent),
// nothing (same file), or replace (a file this step imported before,
// now changed). Anything else is refused: migrate does not overwrite a
// volume it did not import, nor one an instance uses.
func importCheck(c *call, s volumeSpec, v *incusapi.StorageVolume, sum string) (string, phases.Diagnostics) {
	if v == nil {
		return "import", nil
	}
	if d := sameContent(c, s, v); d != nil {
		return "", d
	}
	by, have := importMarks(v)
	switch {
	case have == sum:
		return "none", nil
	case by != c.Addr.String():
		return "", errorf("Volume Exists", "%s: pool %q already has a volume %q that %s did not import (%s). Name another volume, or delete it first.", c.Addr, s.Pool, s.Name, c.Addr, holds(have))
	case len(v.UsedBy) > 0:
		return "", errorf("Volume In Use", "%s: source_file %s changed, but volume %q is used by %s; Incus cannot replace it while in use. Detach it first.", c.Addr, s.SourceFile, s.Name, strings.Join(v.UsedBy, ", "))
	}
	return "replace", nil
}

func planImport(ctx context.Context, c *call, s volumeSpec) sdk.Plan[struct{}] {
	v, _, err := getVolume(ctx, c, s)
	if err != nil {
		return sdk.Plan[struct{}]{Diagnostics: apiErr(c, "Cannot Read Volume", err)}
	}
	if v == nil {
		if d := volumePool(ctx, c, s); d.HasErrors() {
			return sdk.Plan[struct{}]{Diagnostics: d}
		}
	}
	sum, size, diags := fileDigest(c, s.path)
	if diags.HasErrors() {
		return sdk.Plan[struct{}]{Diagnostics: diags}
	}
	what, diags := importCheck(c, s, v, sum)
	switch what {
	case "":
		return sdk.Plan[struct{}]{Diagnostics: diags}
	case "none":
		return sdk.Plan[struct{}]{Diff: fmt.Sprintf("volume %q in pool %q already holds source_file %s: nothing to change", s.Name, s.Pool, s.SourceFile)}
	case "replace":
		return sdk.Plan[struct{}]{Diff: fmt.Sprintf("~ replace volume %q in pool %q: import source_file %s again (%d bytes, sha256 %s; %s)\n  rollback: delete the volume", s.Name, s.Pool, s.SourceFile, size, short(sum), holds(importMarksSum(v)))}
	}
	return sdk.Plan[struct{}]{Diff: fmt.Sprintf("+ import source_file %s (%d bytes, sha256 %s) as iso volume %q in pool %q%s\n  rollback: delete the volume", s.SourceFile, size, short(sum), s.Name, s.Pool, chosenNote(s))}
}

func importMarksSum(v *incusapi.StorageVolume) string {
	_, sum := importMarks(v)
	return sum
}

func applyImport(ctx context.Context, c *call, s volumeSpec) volApply {
	v, _, err := getVolume(ctx, c, s)
	if err != nil {
		return volApply{Diagnostics: apiErr(c, "Cannot Read Volume", err)}
	}
	if v == nil {
		if d := volumePool(ctx, c, s); d.HasErrors() {
			return volApply{Diagnostics: d}
		}
	}
	sum, _, diags := fileDigest(c, s.path)
	if diags.HasErrors() {
		return volApply{Diagnostics: diags}
	}
	out := volumeOut{s.Pool, s.Name}
	what, diags := importCheck(c, s, v, sum)
	switch what {
	case "":
		return volApply{Diagnostics: diags}
	case "none":
		logf(c, "volume %s already holds %s", s.Name, s.SourceFile)
		if by, _ := importMarks(v); by != c.Addr.String() {
			return volApply{Outputs: out, Revert: &sdk.RevertData[volumeRevert]{Description: fmt.Sprintf("nothing to undo: volume %s already held the file", s.Name), Data: volumeRevert{Op: "none"}}}
		}
		return volApply{Outputs: out, Revert: deleteVolume(s)}
	case "replace":
		if err := c.Settings.c.DeleteStorageVolume(ctx, s.Pool, s.Name); err != nil && !incusapi.IsNotFound(err) {
			return volApply{Diagnostics: apiErr(c, "Cannot Replace Volume", err)}
		}
		logf(c, "volume %s deleted, to import the changed %s", s.Name, s.SourceFile)
	}
	f, err := os.Open(s.path)
	if err != nil {
		return volApply{Diagnostics: errorf("Cannot Read Source File", "The source_file of %s cannot be read: %v.", c.Addr, err)}
	}
	defer f.Close()
	// The file is hashed again as it is sent: the marks must name what
	// was imported, even if the file changed since the digest above.
	h := sha256.New()
	if err := c.Settings.c.ImportStorageVolume(ctx, s.Pool, s.Name, s.ContentType, io.TeeReader(f, h)); err != nil {
		return volApply{Diagnostics: apiErr(c, "Cannot Import Volume", err)}
	}
	sent := hex.EncodeToString(h.Sum(nil))
	nv, etag, err := c.Settings.c.StorageVolume(ctx, s.Pool, s.Name)
	if err == nil {
		put := nv.StorageVolumePut
		put.Description = importMark + c.Addr.String() + " sha256 " + sent
		err = c.Settings.c.UpdateStorageVolume(ctx, s.Pool, s.Name, put, etag)
	}
	if err != nil {
		return volApply{Diagnostics: apiErr(c, "Cannot Mark Volume", err), Revert: deleteVolume(s)}
	}
	logf(c, "%s imported as %s volume %s in pool %s (sha256 %s)", s.SourceFile, s.ContentType, s.Name, s.Pool, sent)
	return volApply{Outputs: out, Revert: deleteVolume(s)}
}
