package incusapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strconv"
)

// FileInfo is what the files API says of a path inside an instance
// (the X-Incus-* headers of GET and HEAD /1.0/instances/{name}/files).
type FileInfo struct {
	Type string // "file", "directory" or "symlink"
	UID  int64
	GID  int64
	Mode fs.FileMode // permission bits only
}

// FilePut is what PushFile creates.
type FilePut struct {
	Type    string // "file" (default) or "directory"
	UID     int64
	GID     int64
	Mode    fs.FileMode // 0: the daemon's default (0644, 0755), or the mode of the file it overwrites
	Content io.Reader   // a file's bytes
}

func filesPath(name string) string { return instancePath(name) + "/files" }

func fileInfo(h http.Header) FileInfo {
	uid, _ := strconv.ParseInt(h.Get("X-Incus-Uid"), 10, 64)
	gid, _ := strconv.ParseInt(h.Get("X-Incus-Gid"), 10, 64)
	mode, _ := strconv.ParseUint(h.Get("X-Incus-Mode"), 8, 32)
	return FileInfo{Type: h.Get("X-Incus-Type"), UID: uid, GID: gid, Mode: fs.FileMode(mode) & fs.ModePerm}
}

// StatFile is HEAD /1.0/instances/{name}/files?path=...; a missing path is
// IsNotFound. The daemon answers for a running instance (and for a
// stopped container, whose root it mounts).
func (c *Client) StatFile(ctx context.Context, name, path string) (*FileInfo, error) {
	resp, err := c.raw(ctx, call{method: http.MethodHead, path: filesPath(name), query: query("path", path)})
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	fi := fileInfo(resp.Header)
	return &fi, nil
}

// maxListing bounds the answer of a directory listing: a VM's agent
// makes it, and a compromised guest could answer without end.
const maxListing = 64 << 20

// GetFile is GET /1.0/instances/{name}/files?path=...: for a file, its
// bytes are read through r, which the caller closes; for a directory, r
// is nil and entries are its names, as the instance gave them (a VM's
// agent answers: check them before joining them to anything).
func (c *Client) GetFile(ctx context.Context, name, path string) (fi *FileInfo, r io.ReadCloser, entries []string, err error) {
	resp, err := c.raw(ctx, call{method: http.MethodGet, path: filesPath(name), query: query("path", path)})
	if err != nil {
		return nil, nil, nil, err
	}
	info := fileInfo(resp.Header)
	if info.Type != "directory" {
		return &info, resp.Body, nil, nil
	}
	defer resp.Body.Close()
	var env response
	body := &io.LimitedReader{R: resp.Body, N: maxListing + 1}
	if err := json.NewDecoder(body).Decode(&env); body.N <= 0 {
		return nil, nil, nil, fmt.Errorf("incus: GET %s %s: the directory's listing is larger than %d MiB, which no directory's is: refused", filesPath(name), path, maxListing>>20)
	} else if err != nil {
		return nil, nil, nil, fmt.Errorf("incus: GET %s %s: decoding the directory: %w", filesPath(name), path, err)
	}
	if err := json.Unmarshal(env.Metadata, &entries); err != nil {
		return nil, nil, nil, fmt.Errorf("incus: GET %s %s: decoding the directory: %w", filesPath(name), path, err)
	}
	return &info, nil, entries, nil
}

// PushFile is POST /1.0/instances/{name}/files?path=...: it creates a file
// or a directory, or overwrites a file (X-Incus-write: overwrite). The
// parent directory must exist.
func (c *Client) PushFile(ctx context.Context, name, path string, f FilePut) error {
	typ := f.Type
	if typ == "" {
		typ = "file"
	}
	h := map[string]string{"X-Incus-Type": typ, "X-Incus-Uid": strconv.FormatInt(f.UID, 10), "X-Incus-Gid": strconv.FormatInt(f.GID, 10)}
	if f.Mode != 0 {
		h["X-Incus-Mode"] = fmt.Sprintf("%04o", f.Mode&fs.ModePerm)
	}
	if typ == "file" {
		h["X-Incus-Write"] = "overwrite"
	}
	body := f.Content
	if body == nil {
		body = http.NoBody
	}
	resp, err := c.raw(ctx, call{method: http.MethodPost, path: filesPath(name), query: query("path", path), raw: body, headers: h})
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// DeleteFile is DELETE /1.0/instances/{name}/files?path=...: a file or an
// empty directory (the daemon refuses a directory that is not empty).
func (c *Client) DeleteFile(ctx context.Context, name, path string) error {
	resp, err := c.raw(ctx, call{method: http.MethodDelete, path: filesPath(name), query: query("path", path)})
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}
