/*
 * llmgw_spank: the --llmgw-model=NAME option of sbatch, srun and salloc.
 *
 * The option tells llmgw's Slurm hooks which model a job uses. The Prolog and
 * Epilog see neither the job's environment nor its name (docs/slurm/behaviour.md §4),
 * but they do see SPANK_* variables that an allocator-side plugin sets with
 * spank_job_control_setenv(); the tasks get LLMGW_MODEL from the remote
 * (slurmstepd) side. slurmctld's job_submit.lua also reads the option from
 * the job's spank_job_env and adds a soft preference for nodes holding the
 * model (slurm/lua/job_submit.lua).
 *
 * plugstack.conf:   optional /path/to/llmgw_spank.so
 *
 * The option is registered with spank_option_register() from
 * slurm_spank_init(): Slurm 22.05 ignores a static spank_options[] table in
 * the allocator context, so sbatch and salloc would refuse --llmgw-model
 * (src/common/plugstack.c; seen on the dev cluster, docs/slurm/behaviour.md §6).
 */

#include <stdio.h>
#include <string.h>

#include <slurm/spank.h>

SPANK_PLUGIN(llmgw, 1)

/* The model name rule of catalog.ValidModelName: it becomes a Slurm feature
 * (llmgw.<name>), and job expressions treat , | & * [ ] ( ) as syntax. */
#define LLMGW_MAX_MODEL 64

/* Job control variables reach the Prolog and Epilog with a SPANK_ prefix. */
#define LLMGW_JOB_ENV "LLMGW_MODEL"
#define LLMGW_TASK_ENV "LLMGW_MODEL"

static char llmgw_model[LLMGW_MAX_MODEL + 1];

/* --llmgw-warm: the job asks to wait for its weights before it starts.
 * job_submit.lua sees the option in the job's spank environment and gives
 * the job llmgw's burst-buffer directive (slurm/bb/burst_buffer.lua, issue
 * 28); the Prolog sees SPANK_LLMGW_WARM. */
#define LLMGW_WARM_ENV "LLMGW_WARM"
static int llmgw_warm;

static int llmgw_valid_model(const char *name)
{
	size_t n, i;

	if (name == NULL)
		return 0;
	n = strlen(name);
	if (n == 0 || n > LLMGW_MAX_MODEL)
		return 0;
	for (i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
		      (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
			return 0;
	}
	return 1;
}

static int llmgw_opt_model(int val, const char *optarg, int remote)
{
	(void)val;
	if (!llmgw_valid_model(optarg)) {
		/* In sbatch/srun/salloc this stops the submission with the
		 * reason: a typo is the user's to fix, and a name that cannot be
		 * a feature would never be placed. */
		slurm_error("llmgw: --llmgw-model=%s: a model name is 1 to %d of "
			    "letters, digits, '.', '_' and '-'",
			    optarg ? optarg : "", LLMGW_MAX_MODEL);
		return -1;
	}
	snprintf(llmgw_model, sizeof(llmgw_model), "%s", optarg);
	(void)remote;
	return 0;
}

static int llmgw_opt_warm(int val, const char *optarg, int remote)
{
	(void)val;
	(void)optarg;
	(void)remote;
	llmgw_warm = 1;
	return 0;
}

static struct spank_option llmgw_warm_option = {
	.name = "llmgw-warm",
	.arginfo = NULL,
	.usage = "With --llmgw-model: hold the job until the nodes planned for "
		 "it hold the model, or llmgw's bound passes (llmgw).",
	.has_arg = 0,
	.val = 0,
	.cb = llmgw_opt_warm,
};

static struct spank_option llmgw_option = {
	.name = "llmgw-model",
	.arginfo = "NAME",
	.usage = "Model the job uses (llmgw): placed near nodes holding it, "
		 "and made available by the Prolog.",
	.has_arg = 1,
	.val = 0,
	.cb = llmgw_opt_model,
};

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	switch (spank_context()) {
	case S_CTX_LOCAL:
	case S_CTX_ALLOCATOR:
	case S_CTX_REMOTE:
		/* A failure here must not stop every job on the cluster: the
		 * option is then unknown, and a job using it is refused by
		 * sbatch's own option parser with a clear message. */
		if (spank_option_register(sp, &llmgw_option) != ESPANK_SUCCESS)
			slurm_error("llmgw: cannot register --llmgw-model");
		if (spank_option_register(sp, &llmgw_warm_option) != ESPANK_SUCCESS)
			slurm_error("llmgw: cannot register --llmgw-warm");
		return 0;
	default:
		return 0;
	}
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	spank_err_t rc;

	(void)ac;
	(void)av;
	if (llmgw_model[0] == '\0')
		return 0;
	switch (spank_context()) {
	case S_CTX_LOCAL:
	case S_CTX_ALLOCATOR:
		/* Prolog and Epilog: SPANK_LLMGW_MODEL. */
		rc = spank_job_control_setenv(sp, LLMGW_JOB_ENV, llmgw_model, 1);
		if (rc != ESPANK_SUCCESS)
			/* The job still runs; the Prolog then does not know
			 * the model, as for a job submitted without it. */
			slurm_error("llmgw: cannot pass the model to the Prolog: %s",
				    spank_strerror(rc));
		if (llmgw_warm) {
			rc = spank_job_control_setenv(sp, LLMGW_WARM_ENV, "1", 1);
			if (rc != ESPANK_SUCCESS)
				/* job_submit.lua still sees the option itself. */
				slurm_info("llmgw: cannot set %s: %s", LLMGW_WARM_ENV,
					   spank_strerror(rc));
		}
		return 0;
	case S_CTX_REMOTE:
		/* The tasks. A failure here must not fail the job: the
		 * TaskProlog exports the model too. */
		rc = spank_setenv(sp, LLMGW_TASK_ENV, llmgw_model, 1);
		if (rc != ESPANK_SUCCESS)
			slurm_info("llmgw: cannot set %s for the tasks: %s",
				   LLMGW_TASK_ENV, spank_strerror(rc));
		return 0;
	default:
		return 0;
	}
}
