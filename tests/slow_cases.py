"""Tests that ``make test-fast`` leaves to ``make test``: each took 1 s or more (setup, call and teardown together)
in a run of ``pytest -m "not slow"`` on the 2-core machine at a load of about 10, which is about 0.4 s alone. They are
real processes, rendezvous rounds and source scans, checked in full by ``make test``. tests/conftest.py marks them
``slow`` without giving them the budget of the explicitly slow tests (real TensorFlow, network namespaces).

Refresh: run ``pytest -m "not slow" --durations=0`` and move what takes a second or more here (or make it faster).
A name here that no longer matches a test does nothing (that test runs in test-fast again). The source scans of
test_cluster_single_facts.py stay in test-fast: they share one parse of the source, which one of them pays anyway."""
from __future__ import annotations

# Whole modules: nearly every test in them took a second or more.
SLOW_MODULES = (
    "tests/cli/test_dump_cli.py",
    "tests/cli/test_launch_firewall_cli.py",
    "tests/cli/test_status_logs_cli.py",
    "tests/integration/test_backend_contract.py",
    "tests/integration/test_etcd_backend.py",
    "tests/integration/test_etcd_cluster.py",
    "tests/integration/test_etcd_replay.py",
    "tests/integration/test_launch_ports.py",
    "tests/integration/test_launch_supervisor.py",
    "tests/integration/test_launch_task_secrets.py",
    "tests/unit/elastic/agent/test_agent_in_process.py",
    "tests/unit/elastic/agent/test_agent_name_in_use.py",
    "tests/unit/elastic/tcp/test_rdzv_hostile.py",
    "tests/unit/elastic/tcp/test_rdzv_server.py",
    "tests/unit/elastic/tcp/test_rdzv_storms.py",
    "tests/unit/elastic/tcp/test_rdzv_trust.py",
)

# Single tests (a parametrised test without its [id]: all of its cases).
SLOW_TESTS = frozenset({
    "tests/unit/elastic/tcp/test_rdzv_fleet.py::test_a_burst_of_256_machines_from_their_own_addresses_is_all_welcomed",
    "tests/unit/elastic/tcp/test_rdzv_fleet.py::test_twenty_addresses_flooding_connections_do_not_evict_an_agent_100_ms_away",
    "tests/cli/test_completion.py::test_bash_completes_subcommands_and_flags",
    "tests/cli/test_doctor_wsl_conda.py::test_wsl2_without_loader_conf_gets_the_wsl_fix",
    "tests/cli/test_endpoints_cli.py::test_launcher_metrics_on_a_non_loopback_address_warn",
    "tests/cli/test_mirror_cli.py::test_env_twin_selects_the_tool",
    "tests/cli/test_mirror_cli.py::test_site_scope_writes_the_environment_file",
    "tests/cli/test_mirror_cli.py::test_use_status_restore_round_trip",
    "tests/hostile/test_lock_hostile.py::test_every_lock_flag[--conda]",
    "tests/hostile/test_lock_hostile.py::test_every_lock_flag[--output]",
    "tests/hostile/test_lock_hostile.py::test_every_lock_flag[--requirement]",
    "tests/hostile/test_lock_hostile.py::test_every_lock_flag[--tfdist-wheel]",
    "tests/hostile/test_monitor_hostile.py::test_every_dashboard_flag[--output]",
    "tests/hostile/test_monitor_hostile.py::test_every_dashboard_flag[--title]",
    "tests/hostile/test_monitor_hostile.py::test_every_dashboard_flag[--uid]",
    "tests/hostile/test_monitor_hostile.py::test_every_scrape_config_flag[--nodes]",
    "tests/hostile/test_monitor_hostile.py::test_every_scrape_config_flag[--output]",
    "tests/hostile/test_monitor_hostile.py::test_every_scrape_config_flag[--port-name]",
    "tests/hostile/test_monitor_hostile.py::test_every_scrape_config_flag[--port]",
    "tests/hostile/test_monitor_hostile.py::test_every_scrape_config_flag[--selector]",
    "tests/hostile/test_monitor_hostile.py::test_every_scrape_config_flag[--targets-file]",
    "tests/hostile/test_small_commands_hostile.py::test_config_show_a_hostile_variable_stays_one_line",
    "tests/hostile/test_small_commands_hostile.py::test_config_show_words",
    "tests/hostile/test_small_commands_hostile.py::test_example_output_and_name",
    "tests/hostile/test_small_commands_hostile.py::test_init_folder",
    "tests/hostile/test_small_commands_hostile.py::test_tf_config_flags",
    "tests/integration/test_launch_stops.py::test_an_abort_for_lack_of_threads_is_reported_as_transient_and_retried",
    "tests/integration/test_launch_stops.py::test_detached_grandchild_is_killed_when_the_job_ends",
    "tests/integration/test_launch_stops.py::test_full_disk_under_log_dir_never_blocks_a_task",
    "tests/integration/test_launch_stops.py::test_ipv6_loopback_host",
    "tests/integration/test_launch_stops.py::test_non_loopback_host_is_warned_about",
    "tests/integration/test_launch_stops.py::test_second_ctrl_c_kills_at_once_and_leaves_no_children",
    "tests/integration/test_launch_stops.py::test_sigkill_of_the_launcher_leaves_no_grandchild",
    "tests/integration/test_launch_stops.py::test_stop_before_the_first_heartbeat_skips_the_grace_period",
    "tests/integration/test_launch_stops.py::test_stop_during_a_warm_spare_hand_off",
    "tests/integration/test_launch_stops.py::test_stop_during_the_restart_backoff",
    "tests/integration/test_launch_stops.py::test_temporary_logs_are_removed_at_the_end",
    "tests/integration/test_mirror_check_sync.py::test_use_switches_to_a_healthy_mirror_and_no_check_skips_the_probe",
    "tests/integration/test_mirror_safety.py::test_backups_outside_the_state_directory_are_refused[../../victim]",
    "tests/integration/test_mirror_safety.py::test_backups_outside_the_state_directory_are_refused[/tmp/victim-abs]",
    "tests/integration/test_mirror_safety.py::test_backups_outside_the_state_directory_are_refused[manifest.json]",
    "tests/integration/test_mirror_safety.py::test_credentials_are_masked_everywhere_and_files_are_0600",
    "tests/integration/test_mirror_safety.py::test_owner_group_and_mode_survive_use_and_restore",
    "tests/integration/test_mirror_safety.py::test_restore_keeps_edits_made_after_the_switch",
    "tests/unit/test_bootstrap.py::test_a_bootstrapped_script_sees_what_it_would_see_without_it",
    "tests/unit/test_docs_site.py::test_the_docs_site_builds_strictly",
    "tests/unit/test_doctor_xla.py::test_ptxas_version_survives_hostile_binaries[exec >&-; sleep 30-no answer within]",
    "tests/unit/test_doctor_xla.py::test_ptxas_version_survives_hostile_binaries[sleep 30-no answer within]",
    "tests/unit/elastic/rendezvous/test_flight_across_machines.py::test_a_machine_that_does_not_answer_is_named_not_waited_on_forever",
    "tests/unit/elastic/rendezvous/test_flight_across_machines.py::test_the_rendezvous_asks_every_machine_before_anything_is_stopped_and_writes_one_report",
    "tests/unit/test_launch_options.py::test_the_node_timeout_default_is_written_once",
    "tests/unit/test_launch_seams.py::test_the_server_names_its_members_for_the_driver",
    "tests/unit/test_launch_seams.py::test_the_supervisors_lines_go_to_the_say_it_was_given",
    "tests/unit/test_liveview.py::test_the_header_follows_the_supervisor_through_a_failure_and_a_restart",
    "tests/unit/test_mirror_hostile.py::test_ipv6_plain_http_mirror_gets_a_trusted_host_pip_matches",
    "tests/unit/elastic/agent/test_node_group.py::test_a_failed_parameter_server_job_worker_is_restarted_alone_and_the_round_goes_on",
    "tests/unit/elastic/agent/test_node_group.py::test_a_failure_on_this_machine_carries_the_flight_recorders_verdict",
    "tests/unit/elastic/agent/test_node_group.py::test_a_round_calls_a_hang_at_the_learned_threshold_and_the_next_round_starts_from_it",
    "tests/unit/elastic/agent/test_node_group.py::test_a_worker_without_restarts_left_fails_the_round",
    "tests/unit/elastic/tcp/test_rdzv_admission.py::test_a_hello_already_there_is_answered_by_the_accept_loop_and_the_member_joins",
    "tests/unit/elastic/tcp/test_rdzv_admission.py::test_a_wrong_hello_already_there_is_closed_by_the_accept_loop_without_a_word_and_frees_its_slot",
    "tests/unit/elastic/tcp/test_rdzv_admission.py::test_strangers_that_send_a_hello_and_never_read_do_not_hold_up_the_accept_loop",
    "tests/unit/elastic/tcp/test_rdzv_handshake_path.py::test_a_server_that_proves_the_secret_but_never_welcomes_does_not_hold_the_agent_forever",
    "tests/unit/elastic/tcp/test_rdzv_handshake_path.py::test_both_ends_of_a_member_connection_set_tcp_nodelay",
    "tests/unit/elastic/tcp/test_rdzv_handshake_path.py::test_the_agent_has_no_thread_of_its_own_for_keep_alives",
    "tests/unit/elastic/tcp/test_rdzv_handshake_path.py::test_the_agents_writer_starts_off_the_joining_thread_and_sends_what_was_queued_before_it",
    "tests/unit/elastic/tcp/test_rdzv_handshake_path.py::test_the_server_starts_a_members_writer_when_the_member_first_speaks_not_on_the_welcomes_or_the_ticks_path",
    "tests/unit/test_regex_anchors.py::test_every_run_time_pattern_is_accounted_for",
    "tests/unit/test_regex_anchors.py::test_no_pattern_ends_a_match_with_dollar",
    "tests/unit/test_regex_anchors.py::test_the_scan_finds_the_validation_patterns",
    "tests/unit/elastic/rendezvous/test_snapshot_copy.py::test_a_joiner_gets_the_survivors_snapshot_through_the_rendezvous",
    "tests/unit/elastic/rendezvous/test_snapshot_copy.py::test_a_sender_that_dies_mid_copy_stops_the_round_and_another_survivor_sends_the_next",
})


def listed_slow(nodeid: str) -> bool:
    return nodeid.split("::", 1)[0] in SLOW_MODULES or nodeid in SLOW_TESTS or nodeid.split("[", 1)[0] in SLOW_TESTS
