package runbooks

import (
	"fmt"
	"slices"
	"strings"

	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"

	"github.com/homelab-migrate/migrate/versions"
)

// AllowDowngradeEnv names the image repositories not_older lets through
// though older (comma-separated): the one way past the refusal, given
// for one command, never written in the runbook.
const AllowDowngradeEnv = "MIGRATE_ALLOW_DOWNGRADE"

// notOlderFunc is not_older(image, version): the image, unless its tag
// is a version older than version (what the old VM runs, as migrate init
// read it). An application's database is migrated one way, so the load,
// and with it the plan, fails at the call, naming both versions. An
// empty version (not read) or a tag that is not a version (latest, a
// digest) cannot be judged and passes.
func (l *Loader) notOlderFunc() function.Function {
	return function.New(&function.Spec{
		Description: "The image, refused when its tag is older than the version given.",
		Params:      []function.Parameter{{Name: "image", Type: cty.String}, {Name: "version", Type: cty.String, AllowNull: true}},
		Type:        function.StaticReturnType(cty.String),
		RefineResult: func(b *cty.RefinementBuilder) *cty.RefinementBuilder {
			return b.NotNull()
		},
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			image, floor := args[0].AsString(), ""
			if !args[1].IsNull() {
				floor = args[1].AsString()
			}
			if err := l.checkNotOlder(image, floor); err != nil {
				return cty.NilVal, err
			}
			return args[0], nil
		},
	})
}

func (l *Loader) checkNotOlder(image, floor string) error {
	tag := versions.Tag(image)
	if floor == "" || !versions.Older(tag, floor) {
		return nil
	}
	repo := versions.Repository(image)
	least, _ := versions.Parse(floor)
	if slices.Contains(strings.Split(l.getenv(AllowDowngradeEnv), ","), repo) {
		return nil
	}
	return fmt.Errorf("%s is older than %s, the version the old VM runs: an application's database is migrated one way, so the older release refuses it or breaks it (Synapse refuses a newer schema; Jellyfin's migrations do not run backwards). Use an image of %s or newer (migrate init writes one into site.auto.hcl); to move into this one all the same, knowing that, set %s=%s for this command",
		image, floor, least, AllowDowngradeEnv, repo)
}
