package incushost

// apiExtensions are the API extensions the lab advertises: the real
// server's names (lxc/incus internal/version/api.go) for what the lab
// implements, and only those. The incus CLI checks some before a command
// ("The server is missing the required ... API extension"):
//
//	api_filtering        incus list (?filter=: KEY eq|ne VALUE joined by and, filter.go)
//	storage, network     incus storage list, storage volume list, network list
//	container_backup     incus info INSTANCE (its backups, none here)
//	instances_files_sftp incus file pull/push (SFTP over an upgraded connection)
//	certificate_token    incus config trust add (a token), incus remote add NAME TOKEN
//	container_exec_recording, etag, instances, custom_volume_iso, network_leases:
//	                     what the provider uses
var apiExtensions = []string{
	"etag", "instances", "custom_volume_iso", "container_exec_recording", "network_leases",
	"api_filtering", "storage", "network", "container_backup", "instances_files_sftp",
	"event_lifecycle", "operation_description", "container_last_used_at", "certificate_token",
}
