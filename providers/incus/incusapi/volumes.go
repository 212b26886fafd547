package incusapi

import (
	"context"
	"io"
	"net/http"
	"net/url"
)

// StorageVolumePut is the writable part of a custom storage volume.
type StorageVolumePut struct {
	Config      map[string]string `json:"config"`
	Description string            `json:"description"`
}

// StorageVolume is GET /1.0/storage-pools/{pool}/volumes/custom/{name}.
type StorageVolume struct {
	StorageVolumePut
	Name        string   `json:"name"`
	Type        string   `json:"type"`
	ContentType string   `json:"content_type"` // "filesystem", "block" or "iso"
	UsedBy      []string `json:"used_by"`
}

// StorageVolumesPost creates a custom storage volume.
type StorageVolumesPost struct {
	StorageVolumePut
	Name        string `json:"name"`
	Type        string `json:"type"` // "custom"
	ContentType string `json:"content_type,omitempty"`
}

func volumesPath(pool string) string {
	return "/1.0/storage-pools/" + url.PathEscape(pool) + "/volumes/custom"
}

// StorageVolume reads a custom volume of a pool; it also returns the ETag
// to pass to UpdateStorageVolume.
func (c *Client) StorageVolume(ctx context.Context, pool, name string) (*StorageVolume, string, error) {
	var v StorageVolume
	h, err := c.get(ctx, volumesPath(pool)+"/"+url.PathEscape(name), nil, &v)
	if err != nil {
		return nil, "", err
	}
	return &v, h.Get("ETag"), nil
}

// CreateStorageVolume is POST /1.0/storage-pools/{pool}/volumes/custom.
func (c *Client) CreateStorageVolume(ctx context.Context, pool string, req StorageVolumesPost) error {
	if req.Type == "" {
		req.Type = "custom"
	}
	return c.mutate(ctx, call{method: http.MethodPost, path: volumesPath(pool), body: req}, "", false)
}

// ImportStorageVolume creates a custom volume from a file, as `incus
// storage volume import --type=iso` does: POST
// /1.0/storage-pools/{pool}/volumes/custom with the file as the body and
// its name and type in the X-Incus-name and X-Incus-type headers. The
// daemon sets the volume's size to the file's; an ISO volume's config
// cannot be changed afterwards (its description can).
func (c *Client) ImportStorageVolume(ctx context.Context, pool, name, contentType string, file io.Reader) error {
	return c.mutate(ctx, call{method: http.MethodPost, path: volumesPath(pool), raw: file,
		headers: map[string]string{"X-Incus-name": name, "X-Incus-type": contentType}}, "", false)
}

// UpdateStorageVolume replaces a custom volume's config and description;
// with an etag, a concurrent change fails with ErrConflict.
func (c *Client) UpdateStorageVolume(ctx context.Context, pool, name string, put StorageVolumePut, etag string) error {
	return c.mutate(ctx, call{method: http.MethodPut, path: volumesPath(pool) + "/" + url.PathEscape(name), body: put, etag: etag}, "", false)
}

// DeleteStorageVolume deletes a custom volume; the daemon refuses while
// an instance uses it.
func (c *Client) DeleteStorageVolume(ctx context.Context, pool, name string) error {
	return c.mutate(ctx, call{method: http.MethodDelete, path: volumesPath(pool) + "/" + url.PathEscape(name)}, "", false)
}
