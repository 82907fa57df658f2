"""bert-base on a 4x4 chiplet mesh through the Python API: solve, simulate, compare."""
import distplan

p = distplan.problem("bert-base", "mcm4x4", precisions="fp16,int8")
report = distplan.solve(p, distplan.SolveOptions(time_limit_s=30, top_k=3))
print(report.table())
sim = distplan.simulate(p, report.best.plan, distplan.SimOptions(link_model="fair"))
print(sim.summary())
print(distplan.compare(p, ("random", "dp"), budget_s=10).table())
