"""One machine's group of tasks: plan them (layout, taskenv, ports), start and poll them (group, snapshot), judge them
(rules: pure), restart them (restart: pure), stop them on request (stops), all driven by the supervisor."""
