// The built-in training text for synthetic BPE vocabularies (devtools/bpe_trainer.h):
// original English prose written for mxserve (no third-party text), a little
// dialogue, code and numbers, so that the learned merges look like a real
// English vocabulary's first merges (" the", "ing", " and", ...).
#include <string_view>

#include "devtools/bpe_trainer.h"

namespace mx {

namespace {

constexpr std::string_view kCorpus = R"CORPUS(The morning was quiet in the small town by the river. A baker opened the shop at six, and the smell of fresh bread drifted down the street. Children walked to school in pairs, talking about the test they had forgotten to study for. An old man sat on the bench near the fountain and fed the pigeons, as he did every day, whether it rained or not.

By nine o'clock the market was busy. Farmers sold apples, carrots, onions and potatoes from wooden carts. A woman in a green coat argued about the price of cheese, then laughed and paid what was asked. The bells of the church rang twice, and somewhere a dog barked at a bicycle that went past too fast.

Weather
The forecast for the week is mixed. On Monday and Tuesday we expect clear skies with a light wind from the west. Temperatures will rise to about 21 degrees in the afternoon and fall to 9 degrees at night. On Wednesday clouds will move in from the sea, bringing showers that may turn into heavy rain by the evening. Thursday should be dry but cold, and the weekend looks warm and sunny again. Remember to take an umbrella if you travel on Wednesday.

How to cook a simple soup
First, wash and chop two onions, three carrots and a stick of celery. Heat a spoon of oil in a large pot and cook the onions slowly until they are soft and golden. Add the carrots and the celery, stir well, and let them cook for five minutes. Pour in one litre of water or stock, add a pinch of salt and pepper, and bring everything to the boil. Then lower the heat and let the soup simmer for twenty minutes. When the vegetables are tender, you can blend the soup until it is smooth, or leave it as it is. Serve it hot with a slice of bread and a little butter.

A letter
Dear Anna,
Thank you for your kind letter and for the photographs of the garden. The roses look wonderful this year, and I can see that the new apple tree has finally started to grow. We are all well here. Tom has started his new job at the library, and he says that the work is interesting, although the building is very old and the heating does not always work. I have been reading a lot, mostly history and a few novels that a friend recommended. I hope we can visit you in the summer, when the days are long and the evenings are warm.
With love,
Maria

On learning
Learning something new is rarely a straight line. At first everything seems strange and difficult, and it is easy to believe that other people understand it better. Then, slowly, the pieces begin to fit together. A word that meant nothing last week suddenly makes sense, and a problem that looked impossible can be solved in a few minutes. The important thing is to keep going, to ask questions, and to be patient with yourself. Nobody learns to play the piano, speak a language or write a program in a single day.

Computers and programs
A computer follows instructions exactly, one step after another. A program is a list of such instructions, written in a language that both people and machines can read. When you write a program, you describe the data you have, the result you want, and the steps that lead from one to the other. For example, a small function might take a list of numbers and return their sum:

def total(numbers):
    result = 0
    for number in numbers:
        result = result + number
    return result

print(total([3, 5, 8, 13]))  # prints 29

Programs often contain mistakes, which programmers call bugs. Finding and fixing them is a large part of the work. Good tests help: they run the program on known inputs and check that the outputs are correct. When a test fails, it tells you where to look.

A conversation
"Excuse me, is this the train to the city centre?"
"Yes, it is. It leaves in ten minutes from platform four."
"Thank you. Do you know how long the journey takes?"
"About forty minutes, if there are no delays. It stops at every station."
"That's fine. I'm not in a hurry today."
"Then you can enjoy the view. The line follows the river for most of the way."

The history of the bridge
The stone bridge in the centre of the town was built more than three hundred years ago. Before that, people crossed the river by boat, and in winter, when the water was high, the town was often cut off for weeks. The bridge was paid for by the merchants of the town, who wanted to bring their goods to the markets on the other side. It has seven arches and is about one hundred and twenty metres long. In 1845 a flood damaged two of the arches, but they were repaired within a year. Today the bridge is closed to cars, and it is one of the most popular places for a walk, especially in the evening when the lamps are lit.

Numbers and time
There are sixty seconds in a minute, sixty minutes in an hour and twenty-four hours in a day. A week has seven days, and a year has twelve months, or 365 days, except in a leap year, which has 366. The meeting starts at 10:30 and should end at 12:15, so it will last one hour and forty-five minutes. The total cost was 1,250 euros, which is about 15% more than we planned. Please reply before 3 May 2024.

Science for everyone
Water boils at one hundred degrees Celsius at sea level, but at lower temperatures on a high mountain, because the air pressure is lower there. Light travels faster than sound, which is why we see lightning before we hear the thunder. Plants use the energy of sunlight to turn water and carbon dioxide into sugar and oxygen. The Earth goes around the Sun once a year, and it turns around its own axis once a day, which gives us day and night. The Moon does not make its own light; it reflects the light of the Sun.

Travel notes
We arrived late in the evening, tired after the long drive through the mountains. The hotel was small but clean, and the owner had kept dinner warm for us. The next morning we walked through the old streets, visited the museum and had coffee in a café on the main square. In the afternoon we took a boat across the lake to a village where the houses are painted in bright colours. The water was calm and very clear, and we could see the fish swimming near the surface. In the evening we watched the sun set behind the hills and talked about where we would go next.

Advice for a new gardener
Start small. A few pots on a balcony or a single bed in the garden is enough for the first year. Choose plants that grow easily in your climate, such as herbs, beans, lettuce and tomatoes. Water them in the morning or the evening, not in the heat of the day. Keep a notebook and write down what you planted, when, and how it grew. After a season you will know much more about your soil, your light and your own patience than any book can tell you.

Questions and answers
What is the capital of France? Paris.
How many legs does a spider have? Eight.
Why is the sky blue? Because the air scatters blue light more than red light.
Which is heavier, a kilogram of iron or a kilogram of feathers? They weigh the same.
What do you call a word that reads the same forwards and backwards? A palindrome, like "level" or "radar".

A short story
Once there was a girl who wanted to build a boat. She had never built anything before, but she had read many books about sailors and the sea. Every day after school she collected pieces of wood from the beach and carried them home. Her brother laughed at her, and the neighbours shook their heads. She did not mind. She measured, cut, nailed and painted, and when something broke, she started again. By the end of the summer the boat was finished. It was small and not very beautiful, but it floated. On the first calm morning of autumn she pushed it into the water, climbed in, and rowed out into the bay while the whole village watched from the shore.

Notes on writing
Clear writing comes from clear thinking. Before you write, decide what you want to say and who will read it. Use short sentences when the idea is simple and longer ones when you need to connect several thoughts. Prefer common words to rare ones, and concrete examples to general statements. Read your text aloud: if you run out of breath, the sentence is probably too long. Finally, cut everything that does not help the reader, even the parts you like.

The library
The public library opens at nine on weekdays and at ten on Saturdays. Anyone who lives in the district can borrow up to twelve books at a time, as well as films, music and magazines. There is a quiet reading room on the first floor, a children's corner with cushions and puppets, and a small room with computers that visitors may use for an hour each day. Volunteers run a club for young readers every Thursday afternoon, and once a month a local author comes to talk about a new book and answer questions from the audience.

Healthy habits
Doctors agree on a few simple rules. Sleep seven or eight hours a night, drink enough water, and eat plenty of fruit, vegetables and whole grains. Move your body every day: walking, cycling, swimming and dancing all count. Spend time outdoors, keep in touch with friends and family, and take short breaks when you work at a desk for a long time. None of this is complicated, yet it is surprisingly hard to do consistently, which is why small, regular changes usually work better than sudden, dramatic ones.

An engineer's diary
Monday. The new pump arrived, but the connectors do not match the pipes, so we ordered adapters. Tuesday. Measured the pressure at three points along the line; the readings were lower than expected near the second valve. Wednesday. Found a crack in the seal and replaced it. Pressure is now stable. Thursday. Wrote the report and sent the drawings to the supplier for approval. Friday. Tested the whole system for six hours without a single fault. Everyone went home early, tired but happy.

Music
Music is organised sound. A melody is a sequence of notes, a rhythm is a pattern of long and short beats, and harmony appears when several notes sound together. Some people learn to play by ear, copying what they hear, while others read written music. Both ways are valid, and many musicians use both. Practice matters more than talent: a few minutes every day will take you further than a long session once a week.

Animals of the forest
In the forest behind the village live deer, foxes, badgers, squirrels and many kinds of birds. The deer are shy and usually appear at dawn or dusk at the edge of the fields. Foxes hunt mice and rabbits, and sometimes they steal eggs from farms. Badgers dig deep burrows with several entrances and come out only at night. In spring the woods are full of birdsong, and if you are lucky you may hear a woodpecker drumming on a dead tree.

Instructions for the machine
Before switching the machine on, check that the cover is closed and that the safety switch is in position. Press the green button to start and the red button to stop. Never open the cover while the motor is running. If the warning light flashes, switch the machine off, wait for two minutes, and then restart it. Clean the filter every week with warm water and a soft brush, and replace it after six months of normal use.

Money
A family budget begins with two lists: what comes in and what goes out. Income might include wages, a pension or rent from a flat. Expenses include food, housing, transport, energy, insurance and savings. When the second list is longer than the first, something has to change. It often helps to write down every purchase for a month; many people are surprised by how much they spend on small things like coffee, snacks and subscriptions they no longer use.

Other languages
People greet each other in many ways: hello, bonjour, hola, ciao, hallo, olá, привет, γεια σου, 你好, こんにちは, 안녕하세요, مرحبا, नमस्ते. A naïve visitor may order a crème brûlée at a café in Zürich and pay with a few coins. Emoji are common in messages today: 😀 👍 🎉 ❤️ 🚀.
)CORPUS";

}  // namespace

std::string_view bpe_builtin_corpus() { return kCorpus; }

}  // namespace mx
