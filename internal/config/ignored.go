package config

import "strings"

// ignoredGroups are nova.conf groups keel has no use for: any option in
// them draws one warning, at the group's header.
var ignoredGroups = set(`
	api_database barbican cache cells cinder compute conductor consoleauth
	cyborg database devices ephemeral_storage_encryption glance guestfs
	hyperv image_cache ironic key_manager keystone keystone_authtoken
	mks neutron os_vif_linux_bridge os_vif_ovs
	oslo_concurrency oslo_limit oslo_messaging_amqp oslo_messaging_kafka
	oslo_messaging_rabbit oslo_middleware
	oslo_policy oslo_reports pci placement powervm privsep profiler quota
	rdp remote_debug serial_console service_user spice upgrade_levels vault
	vendordata_dynamic_auth vmware vnc workarounds wsgi zvm`)

// ignoredOptions are Nova options, in groups keel reads, that keel has no
// use for; the value is a note for the warning, if any.
var ignoredOptions = map[string]map[string]string{
	"DEFAULT": notes(`
		debug verbose log_dir log_file log_config_append log_date_format
		use_syslog syslog_log_facility use_stderr use_journal use_json
		watch_log_file default_log_levels logging_context_format_string
		logging_default_format_string logging_debug_format_suffix
		logging_exception_prefix logging_user_identity_format
		publish_errors instance_format instance_uuid_format
		fatal_deprecations rate_limit_interval rate_limit_burst
		control_exchange rpc_response_timeout
		executor_thread_pool_size long_rpc_timeout my_ip
		my_block_storage_ip compute_driver instances_path enabled_apis
		enabled_ssl_apis osapi_compute_listen osapi_compute_listen_port
		osapi_compute_workers metadata_listen metadata_listen_port
		metadata_workers api_paste_config wsgi_log_format
		rootwrap_config
		resume_guests_state_on_host_boot vif_plugging_timeout
		vif_plugging_is_fatal firewall_driver use_neutron
		config_drive_format force_config_drive
		block_device_allocate_retries heal_instance_info_cache_interval
		reclaim_instance_interval running_deleted_instance_action
		running_deleted_instance_poll_interval shutdown_timeout
		sync_power_state_interval instance_usage_audit
		instance_usage_audit_period reserved_huge_pages
		max_concurrent_builds max_concurrent_snapshots
		live_migration_retry_count pybasedir bindir tempdir
		password_length graceful_shutdown_timeout periodic_enable
		periodic_fuzzy_delay default_availability_zone
		default_schedule_zone internal_service_availability_zone
		compute_monitors instance_name_template enable_new_services
		preallocate_images use_cow_images force_raw_images
		virt_mkfs resize_fs_using_block_device timeout_nbd
		image_cache_subdirectory_name remove_unused_base_images
		key ssl_only source_is_ipv6 cert web daemon record flat_injected
		injected_network_template`, map[string]string{
		"initial_cpu_allocation_ratio":  "keel applies cpu_allocation_ratio (default 4.0)",
		"initial_ram_allocation_ratio":  "keel applies ram_allocation_ratio (default 1.0)",
		"initial_disk_allocation_ratio": "keel applies disk_allocation_ratio (default 1.0)",
		"scheduler_default_filters":     "an old name Nova no longer reads; use [filter_scheduler] enabled_filters",
		"scheduler_weight_classes":      "an old name Nova no longer reads; use [filter_scheduler] weight_classes",
		"scheduler_host_subset_size":    "an old name Nova no longer reads; use [filter_scheduler] host_subset_size",
		"scheduler_max_attempts":        "an old name Nova no longer reads; use [scheduler] max_attempts",
		"scheduler_driver":              "an old name Nova no longer reads; keel has one scheduler",
	}),
	"api": notes(`
		auth_strategy use_forwarded_for config_drive_skip_versions
		vendordata_providers vendordata_jsonfile_path
		vendordata_dynamic_targets vendordata_dynamic_ssl_certfile
		vendordata_dynamic_connect_timeout vendordata_dynamic_read_timeout
		vendordata_dynamic_failure_fatal metadata_cache_expiration
		local_metadata_per_cell dhcp_domain neutron_default_tenant_id
		max_limit compute_link_prefix glance_link_prefix
		instance_list_per_project_cells instance_list_cells_batch_strategy
		instance_list_cells_batch_fixed_size
		list_records_by_skipping_down_cells enable_instance_password
		response_validation`, nil),
	"identity": notes(`
		auth_type auth_section auth_url cafile certfile keyfile insecure
		timeout collect_timing split_loggers service_type service_name
		valid_interfaces region_name endpoint_override version
		min_version max_version connect_retries connect_retry_delay
		status_code_retries status_code_retry_delay system_scope
		domain_id domain_name project_id project_name project_domain_id
		project_domain_name trust_id user_id username user_domain_id
		user_domain_name password`, nil),
	"filter_scheduler": notes(`
		isolated_images isolated_hosts
		restrict_isolated_hosts_to_isolated_images
		aggregate_image_properties_isolation_namespace
		aggregate_image_properties_isolation_separator
		track_instance_changes pci_weight_multiplier pci_in_placement
		hypervisor_version_weight_multiplier
		cross_cell_move_weight_multiplier image_props_weight_multiplier
		image_props_weight_setting`, map[string]string{
		"available_filters": "keel's filters are built in; list the ones to run in enabled_filters",
	}),
	"scheduler": notes(`
		driver periodic_task_interval discover_hosts_in_cells_interval
		workers max_placement_results
		query_placement_for_routed_network_aggregates
		limit_tenants_to_placement_aggregate
		placement_aggregate_required_for_tenants
		query_placement_for_image_type_support
		enable_isolated_aggregate_filtering
		image_metadata_prefilter`, map[string]string{
		"query_placement_for_availability_zone": "keel checks availability zones with AvailabilityZoneFilter",
	}),
	"notifications": notes(`
		notify_on_api_faults default_level include_share_mapping`, map[string]string{
		"notify_on_state_change": "keel sends instance.update on every change of vm_state, task_state, host or name",
		"bdms_in_notifications":  "keel has no block devices: block_devices is always null",
	}),
	"oslo_messaging_notifications": notes(`retry`, map[string]string{
		"topics": "these are the legacy (unversioned) notifications' topics; keel sends versioned ones, to [notifications] versioned_notifications_topics",
	}),
	"libvirt": notes(`
		cpu_mode cpu_models cpu_model_extra_flags
		images_type images_volume_group images_rbd_pool
		images_rbd_ceph_conf images_rbd_glance_store_name
		images_rbd_glance_copy_poll_interval images_rbd_glance_copy_timeout
		rbd_user rbd_secret_uuid rbd_connect_timeout inject_password
		inject_key inject_partition live_migration_uri
		live_migration_tunnelled live_migration_with_native_tls
		live_migration_downtime_steps
		live_migration_downtime_delay live_migration_progress_timeout
		disk_cachemodes
		hw_machine_type hw_disk_discard num_pcie_ports
		volume_use_multipath swtpm_enabled swtpm_user swtpm_group
		mem_stats_period_seconds wait_soft_reboot_seconds
		rescue_image_id rescue_kernel_id rescue_ramdisk_id
		snapshot_image_format snapshots_directory sysinfo_serial
		use_virtio_for_bridges file_backed_memory cpu_power_management
		cpu_power_management_strategy rx_queue_size tx_queue_size
		nfs_mount_point_base nfs_mount_options remote_filesystem_transport
		enabled_perf_events device_detach_attempts device_detach_timeout
		max_queues num_memory_encrypted_guests pmem_namespaces
		realtime_scheduler_priority tb_cache_size`, nil),
}

// ignoredOption reports whether group/name is a Nova option keel does not
// use, and the note for its warning.
func ignoredOption(group, name string) (string, bool) {
	note, ok := ignoredOptions[group][name]
	return note, ok
}

func set(words string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(words) {
		m[w] = true
	}
	return m
}

// notes makes a table of ignored options: words without a note, plus
// those with one.
func notes(words string, withNotes map[string]string) map[string]string {
	m := map[string]string{}
	for _, w := range strings.Fields(words) {
		m[w] = ""
	}
	for k, v := range withNotes {
		m[k] = v
	}
	return m
}
