"""One pool across shards (issue 45): the coordinator's rules that move machines between shards
for what the fleet pays and for needs no single shard can serve, beside design §9's order for
shortfalls (bigfleet/coordinator.py). Pure: the coordinator workflow and the simulator plan with
the same code. It may import the core's vocabulary (models, profiles, requirements, reports,
cost), never the coordinator itself."""
