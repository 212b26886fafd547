package helm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"helm.sh/helm/v3/pkg/chart"

	"github.com/homelab-migrate/migrate/phases"
)

// A release's meaning is its chart and values files as much as its
// attributes: digestRelease joins them to the step's input hash, so that
// an edited template or values file (an age one as it is on disk,
// encrypted) is an update, and run --plan refuses a saved plan made with
// other ones. A remote chart is fetched as the install would fetch it: a
// version not pinned resolves to what the repository serves now, and the
// plan records which, with its digest (DigestResponse.Resolved).

func digestRelease(_ context.Context, c *call, a relAttrs) (string, phases.Diagnostics) {
	p := c.Settings
	ch, src, err := p.loadChart(a, "")
	if err != nil {
		return "", chartDiags(c, err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "chart %s\x00", chartName(ch))
	writeChartFiles(h, ch)
	switch {
	case strings.HasPrefix(a.Chart, "oci://"):
		fmt.Fprintf(h, "digest %s\x00", src.digest)
	case src.digest != "":
		// As before OCI charts: a record of a repository chart made then
		// keeps its hash.
		fmt.Fprintf(h, "archive %s\x00", strings.TrimPrefix(src.digest, "sha256:"))
	}
	if src.digest != "" {
		c.Resolved = src.resolved(ch)
	}
	values, diags := p.digestFiles(c, a.ValuesFiles)
	if diags.HasErrors() {
		return "", diags
	}
	fmt.Fprintf(h, "values %s\x00", values)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeChartFiles writes every file of the chart as Helm loaded it
// (templates, values.yaml, subcharts under charts/; .helmignore applied),
// in name order, to h.
func writeChartFiles(h io.Writer, ch *chart.Chart) {
	files := slices.Clone(ch.Raw)
	slices.SortFunc(files, func(x, y *chart.File) int { return strings.Compare(x.Name, y.Name) })
	for _, f := range files {
		fmt.Fprintf(h, "%s\x00%d\x00", f.Name, len(f.Data))
		_, _ = h.Write(f.Data)
	}
}

// fileSum is the hex SHA-256 of a file.
func fileSum(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}
