package incusapi

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"testing"
	"time"
)

// TestStorageVolumes: a custom volume is created, read with its ETag,
// updated, refused with a stale ETag, and deleted; gone, it is not found.
func TestStorageVolumes(t *testing.T) {
	c := socketClient(t)
	ctx := ctxT(t, 60*time.Second)
	name := uniqueName("iapi-vol")
	t.Cleanup(func() { _ = c.DeleteStorageVolume(context.Background(), "default", name) })
	if err := c.CreateStorageVolume(ctx, "default", StorageVolumesPost{Name: name, ContentType: "block",
		StorageVolumePut: StorageVolumePut{Config: map[string]string{"size": "8MiB", "user.a": "1"}}}); err != nil {
		t.Fatal(err)
	}
	v, etag, err := c.StorageVolume(ctx, "default", name)
	if err != nil || v.Name != name || v.ContentType != "block" || v.Config["size"] != "8MiB" || v.Config["user.a"] != "1" || etag == "" {
		t.Fatalf("StorageVolume = %+v %q %v", v, etag, err)
	}
	put := v.StorageVolumePut
	put.Config["user.a"] = "2"
	if err := c.UpdateStorageVolume(ctx, "default", name, put, etag); err != nil {
		t.Fatal(err)
	}
	put.Config["user.a"] = "3"
	if err := c.UpdateStorageVolume(ctx, "default", name, put, etag); !errors.Is(err, ErrConflict) {
		t.Fatalf("an update with a stale ETag: %v", err)
	}
	if v, _, _ := c.StorageVolume(ctx, "default", name); v.Config["user.a"] != "2" {
		t.Fatalf("after the updates: %v", v.Config)
	}
	if err := c.DeleteStorageVolume(ctx, "default", name); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.StorageVolume(ctx, "default", name); !IsNotFound(err) {
		t.Fatalf("a deleted volume: %v", err)
	}
}

// TestImportStorageVolume: a file is imported as an ISO volume of its
// size; its description can be set though its config cannot; a second
// import under the same name is refused.
func TestImportStorageVolume(t *testing.T) {
	c := socketClient(t)
	ctx := ctxT(t, 60*time.Second)
	name := uniqueName("iapi-iso")
	t.Cleanup(func() { _ = c.DeleteStorageVolume(context.Background(), "default", name) })
	data := bytes.Repeat([]byte("not really an iso\n"), 4096)
	if err := c.ImportStorageVolume(ctx, "default", name, "iso", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	v, etag, err := c.StorageVolume(ctx, "default", name)
	if err != nil || v.ContentType != "iso" || v.Config["size"] != strconv.Itoa(len(data)) {
		t.Fatalf("StorageVolume = %+v %v", v, err)
	}
	put := v.StorageVolumePut
	put.Description = "marked"
	if err := c.UpdateStorageVolume(ctx, "default", name, put, etag); err != nil {
		t.Fatalf("setting the description of an ISO volume: %v", err)
	}
	if v, _, _ := c.StorageVolume(ctx, "default", name); v.Description != "marked" {
		t.Fatalf("description = %q", v.Description)
	}
	if err := c.ImportStorageVolume(ctx, "default", name, "iso", bytes.NewReader(data)); err == nil {
		t.Fatal("a second import under the same name succeeded")
	}
}
